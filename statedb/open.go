package statedb

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrNoFile is returned by Open in read-only mode when the state file does
// not exist: nothing has been stored yet.
var ErrNoFile = errors.New("no state file")

// Damaged returns the error that stops the daemon and the CLI on a damaged
// state file at path, wrapping ErrDamaged and naming the file, the cause
// and the way out (state check --salvage, moving the file aside).
func Damaged(path string, cause any) error {
	// A cause from the store names the file already.
	text := strings.TrimPrefix(fmt.Sprint(cause), ErrDamaged.Error()+": ")
	cause = strings.TrimPrefix(text, path+": ")
	return fmt.Errorf("%w: %s: %v\n"+
		"ratelimitd will not run on this file. See what is readable, and copy it to a new file, with\n"+
		"    ratelimitd state check --config CONFIG --salvage NEW.db\n"+
		"then move the file aside and start again, on NEW.db moved into its place or on an empty state\n"+
		"(rate state and the quarantine index start empty; keep the moved file for recovery):\n"+
		"    mv %s %s.damaged-%s", ErrDamaged, path, cause, path, path, time.Now().UTC().Format("20060102T150405"))
}

// Open opens the state file at path, shared and read-only with readOnly,
// waiting up to timeout (1 s if 0) for another process's lock. It
// refuses with Damaged's error a 0-byte file, one BoltDB cannot open or
// panics on, a truncated one, or one failing CheckPages or Tx.Check; a
// locked file is an error saying so (wrapping bbolt's ErrTimeout);
// read-only, a missing file is ErrNoFile. The caller closes the database.
func Open(path string, readOnly bool, timeout time.Duration) (db *bolt.DB, err error) {
	if timeout <= 0 {
		timeout = time.Second
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.Size() == 0:
		return nil, Damaged(path, "the file is empty (0 bytes)")
	case errors.Is(err, fs.ErrNotExist) && readOnly:
		return nil, ErrNoFile
	case err == nil:
		// BoltDB trusts page references: a cycle would hang or crash it.
		if err := CheckPages(path); err != nil {
			return nil, Damaged(path, err)
		}
	}
	db, err = openBolt(path, readOnly, timeout)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, lockedError{path, err}
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("open %s: %w", path, err)
	case err != nil:
		return nil, Damaged(path, err)
	}
	if size := fileSize(db); size < highWater(db) {
		db.Close()
		return nil, Damaged(path, fmt.Sprintf("truncated: %d bytes, its pages need %d", size, highWater(db)))
	}
	if problems := checkDB(db, 5); len(problems) > 0 {
		db.Close()
		return nil, Damaged(path, "consistency check failed: "+strings.Join(problems, "; "))
	}
	return db, nil
}

// lockedError is Open's error on a file another process holds: it says so
// and wraps bbolt's ErrTimeout.
type lockedError struct {
	path string
	err  error
}

func (e lockedError) Error() string {
	return e.path + " is locked by another process (is ratelimitd already running?)"
}

func (e lockedError) Unwrap() error { return e.err }

// openBolt opens path with BoltDB, turning a panic or a fault
// (debug.SetPanicOnFault) into an error, after which it closes the file to
// release its lock.
func openBolt(path string, readOnly bool, timeout time.Duration) (db *bolt.DB, err error) {
	var f *os.File
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f != nil {
				// BoltDB's mapping of the file, which the panic left
				// behind, would keep the lock alive past Close.
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}
			db, err = nil, fmt.Errorf("reading it panicked: %v", r)
		}
	}()
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: readOnly,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			var err error
			f, err = os.OpenFile(name, flag, mode)
			return f, err
		}})
}

// fileSize is the size of db's file and highWater the bytes its pages take:
// a page read past the end of a truncated file would fault.
func fileSize(db *bolt.DB) int64 {
	fi, err := os.Stat(db.Path())
	if err != nil {
		return 0
	}
	return fi.Size()
}

func highWater(db *bolt.DB) (n int64) {
	db.View(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	return n
}

// checkDB runs BoltDB's consistency check and returns at most max of the
// problems it reports (a panic on a corrupt page is one of them).
func checkDB(db *bolt.DB, max int) (problems []string) {
	err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			if len(problems) < max {
				problems = append(problems, err.Error())
			}
		}
		return nil
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// guard runs fn, recording its error, panic or fault (recovered) in bad
// under what.
func guard(bad *[]string, what string, fn func() error) {
	if err := recovered(fn); err != nil {
		*bad = append(*bad, fmt.Sprintf("%s: %v", what, err))
	}
}

// recovered runs fn, which reads a BoltDB file that may be damaged, turning
// a panic, or a fault on the file's mapping, into an error.
func recovered(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading panicked: %v", r)
		}
	}()
	return fn()
}
