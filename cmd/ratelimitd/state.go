package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// errNoStateFile is returned by openStateDB in read-only mode when the
// state file does not exist: nothing has been stored yet.
var errNoStateFile = errors.New("no state file")

// damaged returns the error that stops the daemon and the CLI on a damaged
// state file: it names the file, the cause and the way out.
func damaged(path string, cause any) error {
	// A cause from the store names the file already.
	text := strings.TrimPrefix(fmt.Sprint(cause), ratestore.ErrDamaged.Error()+": ")
	cause = strings.TrimPrefix(text, path+": ")
	return fmt.Errorf("%w: %s: %v\n"+
		"ratelimitd will not run on this file. See what is readable, and copy it to a new file, with\n"+
		"    ratelimitd state check --config CONFIG --salvage NEW.db\n"+
		"then move the file aside and start again, on NEW.db moved into its place or on an empty state\n"+
		"(rate state and the quarantine index start empty; keep the moved file for recovery):\n"+
		"    mv %s %s.damaged-%s", ratestore.ErrDamaged, path, cause, path, path, time.Now().UTC().Format("20060102T150405"))
}

// openStateDB opens the daemon's BoltDB file (lock timeout 1 s), shared
// and read-only when readOnly is set. It refuses a damaged file with
// damaged's error: a 0-byte file (BoltDB would silently start it afresh),
// a file BoltDB cannot open or panics on, or one that fails BoltDB's
// consistency check (tx.Check). In read-only mode a missing file is
// errNoStateFile.
func openStateDB(path string, readOnly bool) (db *bolt.DB, err error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.Size() == 0:
		return nil, damaged(path, "the file is empty (0 bytes)")
	case errors.Is(err, fs.ErrNotExist) && readOnly:
		return nil, errNoStateFile
	case err == nil:
		// BoltDB trusts page references: a cycle would hang or crash it.
		if err := statedb.CheckPages(path); err != nil {
			return nil, damaged(path, err)
		}
	}
	db, err = boltOpen(path, readOnly)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%s is locked by another process (is ratelimitd already running?)", path)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("open %s: %w", path, err)
	case err != nil:
		return nil, damaged(path, err)
	}
	if size := fileSize(db); size < highWater(db) {
		db.Close()
		return nil, damaged(path, fmt.Sprintf("truncated: %d bytes, its pages need %d", size, highWater(db)))
	}
	if problems := checkDB(db, 5); len(problems) > 0 {
		db.Close()
		return nil, damaged(path, "consistency check failed: "+strings.Join(problems, "; "))
	}
	return db, nil
}

// openDB opens the daemon's BoltDB file for writing, refusing a damaged
// one (openStateDB).
func openDB(path string) (*bolt.DB, error) { return openStateDB(path, false) }

// boltOpen opens path with BoltDB (lock timeout 1 s), turning a panic on a
// damaged page, or a fault on a page past the end of a truncated file
// (debug.SetPanicOnFault), into an error and then closing the file, which
// releases its lock.
func boltOpen(path string, readOnly bool) (db *bolt.DB, err error) {
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
	return bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: readOnly,
		OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
			var err error
			f, err = os.OpenFile(name, flag, mode)
			return f, err
		}})
}

// fileSize is the size of db's file, and highWater the bytes its pages
// take (the last transaction's high-water mark): reading a page past the
// end of a truncated file would fault, not panic.
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

// storeLimits returns the parameters of c's limits that give their stored
// states a meaning (ratestore.PersistOptions.Limits), as the engine compiles
// them (policy.LimitParams). c has been validated by config.Load; a
// configuration the engine refuses gives nil, and the engine's own check
// reports it.
func storeLimits(c policy.Config) map[string]ratelimit.Limit {
	m, _ := policy.LimitParams(c)
	return m
}

// openState restores the rate state kept in db into mem, with the
// parameters of the configured limits (stored states of other limits are
// kept until they decay under their own stored parameters). The caller
// starts Run for write-behind flushing, or calls Flush/Close.
func openState(db *bolt.DB, mem *ratestore.Memory, flush time.Duration, limits map[string]ratelimit.Limit, readOnly bool, log *slog.Logger) (*ratestore.Persistent, error) {
	return ratestore.NewPersistent(db, mem, ratestore.PersistOptions{FlushInterval: flush, Limits: limits,
		ReadOnly: readOnly, Logger: log})
}

// offline is the daemon's state opened by the CLI when no daemon runs: the
// BoltDB file (lock timeout 1 s), the restored rate state and an engine on
// it. db and state are nil when a read-only open found no file.
type offline struct {
	db     *bolt.DB
	state  *ratestore.Persistent
	engine *policy.Engine
}

// openOffline opens the state for writing (rate reset, quarantine).
func openOffline(f *config.File) (*offline, error) { return openOfflineMode(f, false) }

// openOfflineMode opens the state; readOnly opens the BoltDB file shared
// and read-only and writes nothing (rate list, rate show).
func openOfflineMode(f *config.File, readOnly bool) (_ *offline, err error) {
	mem := ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: f.Server.MaxKeys})
	db, err := openStateDB(f.Server.DBPath(), readOnly)
	if errors.Is(err, errNoStateFile) {
		eng, err := policy.NewEngine(f.PolicyConfig(), mem)
		return &offline{engine: eng}, err
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	state, err := openState(db, mem, 0, storeLimits(f.PolicyConfig()), readOnly, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", f.Server.DBPath(), err)
	}
	eng, err := policy.NewEngine(f.PolicyConfig(), state)
	if err != nil {
		return nil, err
	}
	return &offline{db: db, state: state, engine: eng}, nil
}

// close writes any rate change (a reset) and closes the file.
func (o *offline) close() error {
	if o.db == nil {
		return nil
	}
	return errors.Join(o.state.Close(), o.db.Close())
}

func newStateCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Inspect the daemon's state file (BoltDB)",
	}
	var salvage string
	check := &cobra.Command{
		Use:   "check",
		Short: "Check the state file and report what is readable",
		Long: `Open STATE_DIR/ratelimitd.db read-only (the daemon must be stopped, or
the file is locked), run BoltDB's consistency check, and report what can
be read: the rate states of each limit, the journal, the quarantine's
buckets. It exits non-zero when the file is damaged.

A damaged file stops "ratelimitd serve". To start again, move it aside
(the daemon then starts with empty rate state and an empty quarantine):

    mv STATE_DIR/ratelimitd.db STATE_DIR/ratelimitd.db.damaged

and keep the moved file for recovery. --salvage NEW copies every bucket
that can still be read (each limit's rate states, each quarantine bucket)
into a new state file NEW, which you can then move into place:

    ratelimitd state check --salvage STATE_DIR/salvaged.db
    mv STATE_DIR/ratelimitd.db STATE_DIR/ratelimitd.db.damaged
    mv STATE_DIR/salvaged.db STATE_DIR/ratelimitd.db

A file whose page tree has a cycle cannot be read safely and is not
salvaged.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(opts.configPath)
			if err != nil {
				return err
			}
			err = stateCheck(cmd.OutOrStdout(), f)
			if salvage != "" && (err == nil || errors.Is(err, ratestore.ErrDamaged)) {
				if serr := salvageState(cmd.OutOrStdout(), f.Server.DBPath(), salvage); serr != nil {
					return errors.Join(err, serr)
				}
			}
			return err
		},
	}
	check.Flags().StringVar(&salvage, "salvage", "", "copy every readable bucket into a new state file at this path")
	cmd.AddCommand(check)
	return cmd
}

// stateCheck writes what is readable in f's state file to w and returns
// an error wrapping ratestore.ErrDamaged when the file is damaged. It never
// writes to the file and recovers BoltDB's panics.
func stateCheck(w io.Writer, f *config.File) (err error) {
	path := f.Server.DBPath()
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "state file: %s (%d bytes)\n", path, fi.Size())
	if fi.Size() == 0 {
		fmt.Fprintln(w, "DAMAGED: the file is empty (0 bytes)")
		return damaged(path, "the file is empty (0 bytes)")
	}
	var bad []string
	switch err := statedb.CheckPages(path); {
	case errors.Is(err, statedb.ErrUnreadable):
		fmt.Fprintf(w, "DAMAGED: page structure: %v\nnothing can be read safely\n", err)
		return damaged(path, err)
	case err != nil:
		fmt.Fprintf(w, "page structure: %v\n", err)
		bad = append(bad, "damaged pages")
	default:
		fmt.Fprintln(w, "page structure: ok")
	}
	db, err := boltOpen(path, true)
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("%s is locked by another process (is ratelimitd running? stop it first)", path)
	}
	if err != nil {
		fmt.Fprintf(w, "DAMAGED: BoltDB cannot open it: %v\n", err)
		return damaged(path, err)
	}
	defer db.Close()
	if size := fileSize(db); size < highWater(db) {
		fmt.Fprintf(w, "DAMAGED: truncated: %d bytes, its pages need %d\n", size, highWater(db))
		return damaged(path, "truncated")
	}
	problems := checkDB(db, 20)
	if len(problems) == 0 {
		fmt.Fprintln(w, "consistency check: ok")
	} else {
		fmt.Fprintf(w, "consistency check: %d problem(s) shown:\n", len(problems))
		for _, p := range problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		bad = append(bad, "consistency check failed")
	}
	// Top-level buckets, each read on its own so one damaged bucket does
	// not hide the others.
	var names []string
	guard(&bad, "listing buckets", func() error {
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
				names = append(names, string(name))
				return nil
			})
		})
	})
	for _, name := range names {
		guard(&bad, "bucket "+name, func() error {
			return db.View(func(tx *bolt.Tx) error {
				keys, buckets := 0, 0
				err := tx.Bucket([]byte(name)).ForEach(func(k, v []byte) error {
					if v == nil {
						buckets++
					} else {
						keys++
					}
					return nil
				})
				fmt.Fprintf(w, "bucket %s: %d keys, %d nested buckets\n", name, keys, buckets)
				return err
			})
		})
	}
	// The rate state as the daemon would restore it, without writing.
	guard(&bad, "rate state", func() error {
		mem := ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: f.Server.MaxKeys})
		p, err := openState(db, mem, 0, storeLimits(f.PolicyConfig()), true, nil)
		if err != nil {
			return err
		}
		defer p.Close()
		per := map[string]int{}
		mem.Range(context.Background(), func(limit, _ string, _ ratelimit.State) bool {
			per[limit]++
			return true
		})
		st := p.Stats()
		fmt.Fprintf(w, "rate state: %d states readable, %d decayed or malformed (%d malformed), journal %d bytes\n",
			st.Restored, st.Dropped, st.Malformed, st.Journal)
		for _, limit := range slices.Sorted(maps.Keys(per)) {
			desc := "parameters unknown"
			if l, ok := p.Params(limit); ok {
				desc = fmt.Sprintf("%s %g per %s", l.Algorithm, l.Limit, policy.FormatDuration(l.Period))
			}
			fmt.Fprintf(w, "  limit %s: %d states (%s)\n", limit, per[limit], desc)
		}
		if st.Malformed > 0 {
			bad = append(bad, fmt.Sprintf("%d malformed rate states", st.Malformed))
		}
		return nil
	})
	if len(bad) > 0 {
		fmt.Fprintf(w, "DAMAGED: %s\n", strings.Join(bad, "; "))
		return damaged(path, strings.Join(bad, "; "))
	}
	fmt.Fprintln(w, "OK")
	return nil
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

// node is a bucket read into memory for salvageState: its keys and values
// and its nested buckets.
type node struct {
	seq     uint64 // the bucket's sequence (the journal's record keys)
	kvs     [][2][]byte
	buckets map[string]*node
}

// readNode copies bucket b (and its nested buckets) out of BoltDB's mapping.
func readNode(b *bolt.Bucket) (*node, error) {
	n := &node{seq: b.Sequence(), buckets: map[string]*node{}}
	err := b.ForEach(func(k, v []byte) error {
		if v != nil {
			n.kvs = append(n.kvs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			return nil
		}
		child, err := readNode(b.Bucket(k))
		n.buckets[string(k)] = child
		return err
	})
	return n, err
}

// write puts n into b.
func (n *node) write(b *bolt.Bucket) (keys int, err error) {
	if err := b.SetSequence(n.seq); err != nil {
		return 0, err
	}
	for _, kv := range n.kvs {
		if err := b.Put(kv[0], kv[1]); err != nil {
			return keys, err
		}
		keys++
	}
	for name, child := range n.buckets {
		cb, err := b.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return keys, err
		}
		k, err := child.write(cb)
		if keys += k; err != nil {
			return keys, err
		}
	}
	return keys, nil
}

// salvageState copies every bucket of the state file src that can be read
// into a new BoltDB file dst (which must not exist): each top-level bucket,
// and for a top-level bucket that cannot be read whole, each of its nested
// buckets (a limit's rate states, a quarantine bucket) that can. It reports
// what it copied and skipped to w. It refuses a file whose page tree
// CheckPages rejects (BoltDB cannot read it without hanging).
func salvageState(w io.Writer, src, dst string) error {
	if err := statedb.CheckPages(src); errors.Is(err, statedb.ErrUnreadable) {
		return fmt.Errorf("salvage: %w (nothing copied)", err)
	}
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("salvage: %s exists; give a new file", dst)
	}
	in, err := boltOpen(src, true)
	if err != nil {
		return fmt.Errorf("salvage: %s: %w", src, err)
	}
	defer in.Close()
	out, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("salvage: %w", err)
	}
	defer out.Close()
	// read runs fn on src in a read-only transaction, recovering a panic or
	// fault on a damaged page.
	read := func(fn func(*bolt.Tx) error) error {
		return recovered(func() error { return in.View(fn) })
	}
	var tops []string
	if err := read(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			tops = append(tops, string(name))
			return nil
		})
	}); err != nil {
		return fmt.Errorf("salvage: the list of buckets cannot be read: %w", err)
	}
	copied, skipped := 0, 0
	save := func(path []string, n *node) error {
		return out.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(path[0]))
			for _, p := range path[1:] {
				if err == nil {
					b, err = b.CreateBucketIfNotExists([]byte(p))
				}
			}
			if err != nil {
				return err
			}
			k, err := n.write(b)
			fmt.Fprintf(w, "salvaged %s: %d keys\n", strings.Join(path, "/"), k)
			copied += k
			return err
		})
	}
	for _, top := range tops {
		var n *node
		err := read(func(tx *bolt.Tx) error {
			var err error
			n, err = readNode(tx.Bucket([]byte(top)))
			return err
		})
		if err == nil {
			if err := save([]string{top}, n); err != nil {
				return fmt.Errorf("salvage: write %s: %w", dst, err)
			}
			continue
		}
		// The bucket cannot be read whole: try its nested buckets and
		// its keys one by one.
		fmt.Fprintf(w, "bucket %s cannot be read whole (%v); trying its parts\n", top, err)
		var children []string
		if err := read(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(top)).ForEachBucket(func(k []byte) error {
				children = append(children, string(k))
				return nil
			})
		}); err != nil {
			fmt.Fprintf(w, "skipped %s: %v\n", top, err)
			skipped++
			continue
		}
		for _, child := range children {
			var n *node
			err := read(func(tx *bolt.Tx) error {
				var err error
				n, err = readNode(tx.Bucket([]byte(top)).Bucket([]byte(child)))
				return err
			})
			if err != nil {
				fmt.Fprintf(w, "skipped %s/%s: %v\n", top, child, err)
				skipped++
				continue
			}
			if err := save([]string{top, child}, n); err != nil {
				return fmt.Errorf("salvage: write %s: %w", dst, err)
			}
		}
	}
	fmt.Fprintf(w, "salvage: %d keys copied to %s, %d buckets skipped\n", copied, dst, skipped)
	return nil
}
