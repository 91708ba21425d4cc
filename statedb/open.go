package statedb

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// ErrNoFile is returned by a read-only Open for a missing state file.
var ErrNoFile = errors.New("no state file")

// Damaged returns the error for a damaged state file at path, wrapping
// ErrDamaged and naming the cause and the way out.
func Damaged(path string, cause any) error {
	text := strings.TrimPrefix(fmt.Sprint(cause), ErrDamaged.Error()+": ")
	cause = strings.TrimPrefix(text, path+": ")
	return fmt.Errorf("%w: %s: %v\n"+
		"ratelimitd will not run on this file. See what is readable, and copy it to a new file, with\n"+
		"    ratelimitd state check --config CONFIG --salvage NEW.db\n"+
		"then move the file aside and start again, on NEW.db moved into its place or on an empty state\n"+
		"(rate state and the quarantine index start empty; keep the moved file for recovery):\n"+
		"    mv %s %s.damaged-%s", ErrDamaged, path, cause, path, path, time.Now().UTC().Format("20060102T150405"))
}

// Open opens the state file at path (shared with readOnly), waiting up to
// timeout (0: 1 s) for the lock; the caller closes db. Errors: Damaged's,
// bbolt's ErrTimeout wrapped, ErrNoFile, one wrapping ErrPermission.
func Open(path string, readOnly bool, timeout time.Duration) (db *bolt.DB, err error) {
	if timeout <= 0 {
		timeout = time.Second
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return nil, notPermitted(path, err)
	case err == nil && fi.Size() == 0:
		return nil, Damaged(path, "the file is empty (0 bytes)")
	case errors.Is(err, fs.ErrNotExist) && readOnly:
		return nil, ErrNoFile
	case err == nil:
		// BoltDB trusts page references: a cycle would hang or crash it.
		if err := CheckPages(path); errors.Is(err, fs.ErrPermission) {
			return nil, notPermitted(path, err)
		} else if err != nil {
			return nil, Damaged(path, err)
		}
	}
	db, err = openBolt(path, readOnly, timeout)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, lockedError{path, err}
	case errors.Is(err, fs.ErrPermission):
		return nil, notPermitted(path, err)
	case err != nil:
		return nil, Damaged(path, err)
	}
	if problems := checkDB(db, 5); len(problems) > 0 {
		db.Close()
		return nil, Damaged(path, "consistency check failed: "+strings.Join(problems, "; "))
	}
	return db, nil
}

// notPermitted is Open's error when cause, a permission error, stopped it
// at path: it names the file (or the directory, when the file cannot even
// be looked at), its owner and mode, and this process's user.
func notPermitted(path string, cause error) error {
	what := path
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrPermission) {
		what = filepath.Dir(path)
	}
	return fmt.Errorf("%w: %s is %s; this process runs as %s (%w)",
		ErrPermission, what, Owner(what), ids(os.Geteuid(), os.Getegid()), cause)
}

// Owner describes path's owner, group and mode for an error message:
// "owned by root:root (mode 0600)".
func Owner(path string) string {
	fi, err := os.Lstat(path)
	if err != nil {
		return "not readable: " + err.Error()
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Sprintf("mode %04o", fi.Mode().Perm())
	}
	return fmt.Sprintf("owned by %s (mode %04o)", ids(int(st.Uid), int(st.Gid)), fi.Mode().Perm())
}

// ids names a uid and a gid, "user:group", by number where unknown.
func ids(uid, gid int) string {
	u, g := strconv.Itoa(uid), strconv.Itoa(gid)
	if x, err := user.LookupId(u); err == nil {
		u = x.Username
	}
	if x, err := user.LookupGroupId(g); err == nil {
		g = x.Name
	}
	return u + ":" + g
}

// lockedError is Open's error on a locked file (wraps bbolt's ErrTimeout).
type lockedError struct {
	path string
	err  error
}

func (e lockedError) Error() string {
	return e.path + " is locked by another process (is ratelimitd already running?)"
}

func (e lockedError) Unwrap() error { return e.err }

// openBolt opens path with BoltDB, turning a panic or fault into an error.
func openBolt(path string, readOnly bool, timeout time.Duration) (db *bolt.DB, err error) {
	var f *os.File
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if f != nil {
				// The mapping left behind would keep the lock.
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

// checkDB runs Tx.Check and returns at most max problems.
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

// guard runs fn, recording its error, panic or fault in bad under what.
func guard(bad *[]string, what string, fn func() error) {
	if err := recovered(fn); err != nil {
		*bad = append(*bad, fmt.Sprintf("%s: %v", what, err))
	}
}

// recovered runs fn, turning a BoltDB panic or fault into an error.
func recovered(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("reading panicked: %v", r)
		}
	}()
	return fn()
}
