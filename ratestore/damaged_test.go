package ratestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/internal/boltcorrupt"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Damaged state files: malformed states and journal records, zeroed and
// corrupt pages (restored without a panic), the structures CheckPages
// refuses, and a compaction that fails.

// A stored NaN or infinite rate is refused on restore,
// counted and logged.
func TestPersistentRestoreRejectsNonFinite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	newPersistent(t, db, MemoryOptions{}, PersistOptions{}).Close()
	if err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.Bucket(bucketName).CreateBucket([]byte("hourly"))
		if err != nil {
			return err
		}
		for i, r := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), 3} {
			v := make([]byte, valueLen)
			binary.BigEndian.PutUint64(v, uint64(t0.UnixNano()))
			binary.BigEndian.PutUint64(v[8:], math.Float64bits(r))
			k := []byte(fmt.Sprint("k", i))
			if err := b.Put(k, statedb.Seal(nil, k, cellVersion, v)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: func() time.Time { return t0 }})
	if st := p.Stats(); st.Malformed != 3 || st.Restored != 1 {
		t.Errorf("stats %+v, want 3 malformed, 1 restored", st)
	}
	if !strings.Contains(logs.String(), "malformed rate states dropped") {
		t.Errorf("not logged: %s", logs.String())
	}
	p.Close()
	closeDB()
}

// NewPersistent on a file whose data pages are zeroed
// returns ErrDamaged instead of panicking.
func TestPersistentZeroedPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	for i := range 2000 {
		p.Update(context.Background(), "hourly", fmt.Sprintf("user%05d", i), set(ratelimit.State{Time: int64(i + 1), Rate: 1}))
	}
	p.Close()
	if err := p.compact(nil); err != nil && !errors.Is(err, errCompactionStopped) {
		t.Fatal(err)
	}
	closeDB()
	zeroDataPages(t, path)
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err) // the meta pages are intact
	}
	defer db.Close()
	_, err = NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("NewPersistent on zeroed pages: %v", err)
	}
}

// zeroDataPages zeroes the bucket pages of the BoltDB file at path.
func zeroDataPages(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	boltcorrupt.ZeroBucketPages(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeRecord feeds corrupt journal records to the decoder: it must
// never panic nor report an entry outside the record, and the header it
// reports for an entry (which compaction.entry decodes again) gives the
// key and the state it reports.
func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte{recordVersion, 0, 1, 6, 'h', 'o', 'u', 'r', 'l', 'y', 0, 0, 0, 1, 2, 'k', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{recordVersion, 0, 2, 1, 'x', 0, 0, 0, 2, 3, 'a'})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, v []byte) {
		decodeRecord(v, func(name []byte, at, off, n int, del bool) error {
			need := off + n
			if !del {
				need += valueLen
			}
			if len(name) == 0 || at < 0 || off <= at || n <= 0 || need > len(v) {
				t.Fatalf("entry at %d off %d n %d del %v outside a %d-byte record", at, off, n, del, len(v))
			}
			c := compaction{recs: [][]byte{v}}
			k, s, d := c.entry(jentry{off: uint32(at)})
			if !bytes.Equal(k, v[off:off+n]) || d != del || !del && !bytes.Equal(s, v[off+n:need]) {
				t.Fatalf("entry at %d: key %q state %x del %v, want %q del %v", at, k, s, d, v[off:off+n], del)
			}
			if !del {
				decodeState(v[off+n : off+n+valueLen])
			}
			return nil
		})
	})
}

// FuzzRestoreCorruptPage overwrites one page of a small state file with
// fuzz data: restoring never panics, and whatever it restores is finite.
// Each execution opens a BoltDB file (about 3 ms on a loaded 2-core
// machine), so scripts/fuzz.sh runs it 10,000 times, not 300,000.
// fuzz.sh: 10000x
func FuzzRestoreCorruptPage(f *testing.F) {
	dir := f.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "ratelimitd-fuzz"); err == nil { // memory: 3x the executions
		dir = shm
		f.Cleanup(func() { os.RemoveAll(shm) })
	}
	clean := filepath.Join(dir, "clean.db")
	db, err := bbolt.Open(clean, 0o600, nil)
	if err != nil {
		f.Fatal(err)
	}
	p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}})
	if err != nil {
		f.Fatal(err)
	}
	// Enough keys for the limit's bucket to take pages of its own, a
	// compacted snapshot and a journal record on top.
	for i := range 200 {
		p.Update(context.Background(), "hourly", fmt.Sprintf("user%03d", i), set(ratelimit.State{Time: t0.UnixNano(), Rate: float64(i)}))
	}
	p.Flush()
	p.compact(nil)
	p.Update(context.Background(), "hourly", "late", set(ratelimit.State{Time: t0.UnixNano(), Rate: 2}))
	p.Close()
	db.Close()
	image, err := os.ReadFile(clean)
	if err != nil {
		f.Fatal(err)
	}
	ps := os.Getpagesize()
	pages := len(image) / ps
	f.Add(uint8(2), uint16(0), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(uint8(3), uint16(16), bytes.Repeat([]byte{0}, 64))
	f.Fuzz(func(t *testing.T, page uint8, off uint16, data []byte) {
		b := bytes.Clone(image)
		at := (2+int(page)%max(pages-2, 1))*ps + int(off)%ps
		copy(b[min(at, len(b)):], data)
		path := filepath.Join(dir, "fuzz.db") // one call at a time per process
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		// The daemon's sequence: the page walk, BoltDB's open (guarded)
		// and consistency check, then the restore.
		if err := statedb.CheckPages(path); err != nil {
			if !errors.Is(err, ErrDamaged) {
				t.Fatal(err)
			}
			if !errors.Is(err, statedb.ErrUnreadable) {
				// What state check --salvage then does: read every
				// bucket with BoltDB, recovering its panics. It must
				// end (a hang fails the fuzz run).
				readAllGuarded(path)
			}
			return
		}
		db, err := openGuarded(path)
		if err != nil {
			return
		}
		defer db.Close()
		bad := false
		db.View(func(tx *bbolt.Tx) error {
			for range tx.Check() {
				bad = true
			}
			return nil
		})
		if bad {
			return
		}
		p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{ReadOnly: true,
			Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: func() time.Time { return t0 }})
		if err != nil {
			return
		}
		p.Range(context.Background(), func(_, _ string, s ratelimit.State) bool {
			if math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) {
				t.Errorf("restored a non-finite state %v", s)
			}
			return true
		})
	})
}

// readAllGuarded reads every key of every bucket of the BoltDB file at
// path, recovering BoltDB's panics and faults.
func readAllGuarded(path string) {
	db, err := openGuarded(path)
	if err != nil {
		return
	}
	defer db.Close()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() { recover() }()
	var walk func(b *bbolt.Bucket) error
	walk = func(b *bbolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(b.Bucket(k))
			}
			return nil
		})
	}
	db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { return walk(b) })
	})
}

// openGuarded opens a BoltDB file read-only, turning a panic into an
// error (as the daemon's openStateDB does).
func openGuarded(path string) (db *bbolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
}

// CheckPages refuses the structures BoltDB cannot survive: a branch page
// that refers to itself (bbolt's cursor and Tx.Check descend forever) and
// an inline bucket page whose flags are not exactly a leaf's (found by
// FuzzRestoreCorruptPage: the cursor then reads it as a branch and loops).
func TestCheckPagesRefusesCycles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}})
	for i := range 3000 {
		p.Update(context.Background(), "hourly", fmt.Sprintf("user%05d", i), set(ratelimit.State{Time: t0.UnixNano(), Rate: 1}))
	}
	p.Flush()
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	p.Close()
	closeDB()
	if err := statedb.CheckPages(path); err != nil {
		t.Fatalf("a sound file: %v", err)
	}
	image, _ := os.ReadFile(path)
	ps := os.Getpagesize()
	damage := func(what string, fn func(b []byte) bool) {
		t.Helper()
		b := bytes.Clone(image)
		if !fn(b) {
			t.Fatalf("%s: no page to damage", what)
		}
		os.WriteFile(path, b, 0o600)
		if err := statedb.CheckPages(path); !errors.Is(err, ErrDamaged) || !errors.Is(err, statedb.ErrUnreadable) {
			t.Errorf("%s: CheckPages = %v, want ErrDamaged and ErrUnreadable", what, err)
		}
	}
	damage("branch page referring to itself", func(b []byte) bool {
		for pg := 2; pg < len(b)/ps; pg++ {
			if binary.LittleEndian.Uint16(b[pg*ps+8:]) == boltcorrupt.BranchPageFlag && binary.LittleEndian.Uint64(b[pg*ps:]) == uint64(pg) {
				binary.LittleEndian.PutUint64(b[pg*ps+boltcorrupt.PageHeaderSize+8:], uint64(pg))
				return true
			}
		}
		return false
	})
	damage("inline bucket page flags 0x42", func(b []byte) bool {
		// The ratemeta bucket is inline: InBucket (16 bytes, root 0)
		// then its page header, whose flags are at offset 8.
		i := bytes.Index(b, []byte("ratemeta"))
		if i < 0 {
			return false
		}
		v := b[i+len("ratemeta"):]
		if binary.LittleEndian.Uint64(v) != 0 || binary.LittleEndian.Uint16(v[16+8:]) != boltcorrupt.LeafPageFlag {
			return false
		}
		v[16+8] = 0x42
		return true
	})
	damage("page out of range", func(b []byte) bool {
		for pg := 2; pg < len(b)/ps; pg++ {
			if binary.LittleEndian.Uint16(b[pg*ps+8:]) == boltcorrupt.BranchPageFlag && binary.LittleEndian.Uint64(b[pg*ps:]) == uint64(pg) {
				binary.LittleEndian.PutUint64(b[pg*ps+boltcorrupt.PageHeaderSize+8:], 1<<40)
				return true
			}
		}
		return false
	})
}

// A failed compaction is logged with its cause, counted,
// and recorded as the last error, while flushes go on.
func TestPersistentCompactionFailureLoud(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	var logs mtatest.SyncBuffer
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}})
	p.mu.Lock()
	p.compactMin, p.compactPerPair = 0, 0 // compact after every flush
	p.mu.Unlock()
	// A journal record of a format this version does not know: every
	// compaction fails on it (the restore, which ran before, did not see it).
	if err := db.Update(func(tx *bbolt.Tx) error {
		j, err := tx.CreateBucketIfNotExists(journalName)
		if err != nil {
			return err
		}
		key := binary.BigEndian.AppendUint64(nil, 1<<62)
		return j.Put(key, statedb.Seal(nil, key, recordVersion+1, nil))
	}); err != nil {
		t.Fatal(err)
	}
	stop := flushEvery(5*time.Millisecond, nil, p.Tick)
	for i := 0; p.Stats().CompactionFailures == 0; i++ {
		p.Update(ctx, "hourly", fmt.Sprint("k", i), set(ratelimit.State{Time: t0.UnixNano(), Rate: 1}))
		if i > 20000 {
			t.Fatal("no compaction failed")
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	st := p.Stats()
	if !strings.Contains(st.LastError, "journal record format 3") || st.LastErrorAt.IsZero() || st.Flushes == 0 || st.LastFlushAt.IsZero() {
		t.Errorf("stats after a failed compaction: %+v", st)
	}
	if l := logs.String(); !strings.Contains(l, "rate journal compaction failed") || !strings.Contains(l, "journal record format 3") {
		t.Errorf("not logged with its cause:\n%s", l)
	}
	p.Close()
}

// Zeroed pages are damage BoltDB panics on (recoverably): CheckPages
// reports them without ErrUnreadable, so what remains may be salvaged.
func TestCheckPagesZeroedIsReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	for i := range 500 {
		p.Update(context.Background(), "hourly", fmt.Sprintf("user%05d", i), set(ratelimit.State{Time: 1, Rate: 1}))
	}
	p.Close()
	closeDB()
	zeroDataPages(t, path)
	if err := statedb.CheckPages(path); !errors.Is(err, ErrDamaged) || errors.Is(err, statedb.ErrUnreadable) {
		t.Fatalf("CheckPages = %v, want ErrDamaged only", err)
	}
}
