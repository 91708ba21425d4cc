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
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/internal/boltcorrupt"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Tests of issue 8 items 2, 4, 10 and 13 in the store: stored parameters,
// read-only restore, conversion, protected eviction, damaged files.

var (
	hourlyExp  = ratelimit.Limit{Limit: 10, Period: time.Hour}
	hourlyGCRA = ratelimit.Limit{Limit: 10, Period: time.Hour, Algorithm: ratelimit.GCRA}
	t0         = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
)

// burst counts n requests of cost 1 at now under l (strict) on top of s.
func burst(l ratelimit.Limit, s ratelimit.State, now time.Time, n int) ratelimit.State {
	l.Mode = ratelimit.Strict
	for range n {
		s, _ = l.Next(l.Check(s, now, 1), false)
	}
	return s
}

func clock(at *atomic.Int64) func() time.Time {
	return func() time.Time { return time.Unix(0, at.Load()) }
}

// A configuration that no longer names a limit keeps its states until they
// have decayed under their own stored parameters.
func TestPersistentUnconfiguredLimitKept(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	var now atomic.Int64
	now.Store(t0.UnixNano())
	both := map[string]ratelimit.Limit{"hourly": hourlyExp, "gone": hourlyExp}
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: both, Now: clock(&now)})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "alice", set(over))
	p.Update(ctx, "gone", "mallory", set(over))
	p.Close()
	closeDB()

	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: clock(&now)})
	if s, _ := p.Get(ctx, "gone", "mallory"); s != over {
		t.Fatalf("state of the unconfigured limit after restart: %v, want %v", s, over)
	}
	if st := p.Stats(); st.Unconfigured != 1 || st.Dropped != 0 {
		t.Errorf("stats %+v, want 1 unconfigured, 0 dropped", st)
	}
	if l, ok := p.Params("gone"); !ok || l != hourlyExp {
		t.Errorf("Params(gone) = %v, %v", l, ok)
	}
	now.Store(t0.Add(time.Hour).UnixNano()) // rate 20/e: not negligible
	if n := p.Sweep(); n != 0 {
		t.Fatalf("sweep dropped %d undecayed states", n)
	}
	now.Store(t0.Add(10 * time.Hour).UnixNano()) // 20*e^-10 < 1: decayed
	if n := p.Sweep(); n != 2 {
		t.Fatalf("sweep of decayed states dropped %d, want 2", n)
	}
	p.Close()
	if got := stored(t, db); len(got) != 0 {
		t.Errorf("decayed states still stored: %v", got)
	}
	closeDB()
}

// Without stored parameters (a file written before they were), states of
// an unconfigured limit are kept for the retention.
func TestPersistentUnknownParamsRetention(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{}) // no Limits: no meta
	p.Update(ctx, "old", "mallory", set(ratelimit.State{Time: t0.UnixNano(), Rate: 50}))
	p.Close()
	closeDB()
	var now atomic.Int64
	now.Store(t0.Add(DefaultRetention - time.Hour).UnixNano())
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{}, Now: clock(&now)})
	if p.Memory().Len() != 1 || p.Sweep() != 0 {
		t.Fatalf("state of unknown parameters dropped within the retention")
	}
	now.Store(t0.Add(DefaultRetention + time.Hour).UnixNano())
	if n := p.Sweep(); n != 1 {
		t.Fatalf("sweep after the retention dropped %d, want 1", n)
	}
	p.Close()
	closeDB()
}

// ReadOnly restores without writing a byte, even states it would drop.
func TestPersistentReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}})
	p.Update(ctx, "hourly", "alice", set(ratelimit.State{Time: t0.UnixNano(), Rate: 5}))
	p.Update(ctx, "hourly", "bob", set(ratelimit.State{Time: 1, Rate: 1})) // negligible now
	p.Close()
	closeDB()
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0.Add(time.Minute) }
	// Another configuration, with a changed algorithm: converted in
	// memory only.
	p, err = NewPersistent(ro, NewMemory(MemoryOptions{}), PersistOptions{ReadOnly: true, Now: now,
		Limits: map[string]ratelimit.Limit{"hourly": hourlyGCRA, "daily": hourlyExp}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Memory().Len() != 1 {
		t.Errorf("read-only restore holds %d states, want 1", p.Memory().Len())
	}
	if err := p.Update(ctx, "hourly", "carol", set(ratelimit.State{Time: 5})); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Update: %v", err)
	}
	if _, err := p.Delete(ctx, "hourly", "alice"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Delete: %v", err)
	}
	if err := p.Flush(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Flush: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	ro.Close()
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a read-only restore changed the file")
	}
}

// convert keeps a refused sender refused at least as long, and lets a
// sender who was not refused through.
func TestConvertNeverShortensRefusal(t *testing.T) {
	now := t0.Add(5 * time.Minute)
	limits := []ratelimit.Limit{
		hourlyExp, hourlyGCRA,
		{Limit: 10, Period: time.Hour, Algorithm: ratelimit.Cooldown},
		{Limit: 10, Period: time.Hour, Algorithm: ratelimit.EARRRL},
		{Limit: 10, Period: 24 * time.Hour},
		{Limit: 10, Period: 10 * time.Minute, Algorithm: ratelimit.GCRA},
		{Limit: 10, Period: time.Hour, Algorithm: ratelimit.Baseline, Floor: 5},
		{Limit: 10, Period: 24 * time.Hour, Algorithm: ratelimit.Baseline, Floor: 5},
	}
	for _, from := range limits {
		for _, to := range limits {
			if sameMeaning(from, to) {
				continue
			}
			name := fmt.Sprintf("%s/%v->%s/%v", from.Algorithm, from.Period, to.Algorithm, to.Period)
			over := burst(from, ratelimit.State{}, t0, 30)
			w := retryWait(from, over, now)
			if w == 0 {
				t.Fatalf("%s: the burst is not refused under the old parameters", name)
			}
			c := convert(over, from, to, now)
			if got := retryWait(to, c, now); got < w {
				t.Errorf("%s: refused for %v after conversion, %v before", name, got, w)
			}
			light := burst(from, ratelimit.State{}, t0, 2)
			if retryWait(from, light, now) != 0 {
				t.Fatalf("%s: 2 messages refused", name)
			}
			if got := retryWait(to, convert(light, from, to, now), now); got != 0 {
				t.Errorf("%s: a sender of 2 messages is refused for %v after conversion", name, got)
			}
		}
	}
}

// A restart whose configuration changed a limit's algorithm keeps the
// deferred sender deferred, stores the converted state with the new
// parameters, and does not convert again at the next restart.
func TestPersistentRestartConverts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	now := func() time.Time { return t0.Add(time.Minute) }
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: now})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "mallory", set(over))
	p.Close()
	closeDB()
	w := retryWait(hourlyExp, over, now())

	gcra := map[string]ratelimit.Limit{"hourly": hourlyGCRA}
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: gcra, Now: now})
	s, _ := p.Get(ctx, "hourly", "mallory")
	if got := retryWait(hourlyGCRA, s, now()); got < w {
		t.Fatalf("after exponential -> gcra: refused for %v, want >= %v (state %v)", got, w, s)
	}
	if p.Stats().Converted != 1 {
		t.Errorf("Converted = %d", p.Stats().Converted)
	}
	if got := stored(t, db)[pair{"hourly", "mallory"}]; got != s {
		t.Errorf("stored %v, want the converted %v", got, s)
	}
	p.Close()
	closeDB()
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: gcra, Now: now})
	if s2, _ := p.Get(ctx, "hourly", "mallory"); s2 != s || p.Stats().Converted != 0 {
		t.Errorf("second restart: %v (converted %d), want %v unconverted", s2, p.Stats().Converted, s)
	}
	p.Close()
	closeDB()
}

// Reconfigure converts while the swap is installed, and a failed swap
// changes nothing.
func TestPersistentReconfigure(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	now := func() time.Time { return t0.Add(time.Minute) }
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: now})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "mallory", set(over))
	gcra := map[string]ratelimit.Limit{"hourly": hourlyGCRA}
	if err := p.Reconfigure(gcra, func() error { return errors.New("invalid") }); err == nil {
		t.Fatal("a failed swap was not returned")
	}
	if s, _ := p.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("a failed reconfiguration changed the state to %v", s)
	}
	swapped := false
	if err := p.Reconfigure(gcra, func() error { swapped = true; return nil }); err != nil || !swapped {
		t.Fatal(err, swapped)
	}
	s, _ := p.Get(ctx, "hourly", "mallory")
	if got, want := retryWait(hourlyGCRA, s, now()), retryWait(hourlyExp, over, now()); got < want {
		t.Fatalf("after reload to gcra: refused for %v, want >= %v", got, want)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if got := stored(t, db)[pair{"hourly", "mallory"}]; got != s {
		t.Errorf("stored %v, want %v", got, s)
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		if l, ok := decodeParams(tx.Bucket(metaName).Get([]byte("hourly"))); !ok || l != hourlyGCRA {
			t.Errorf("stored parameters %v, %v", l, ok)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	closeDB()
}

// Issue 8 item 13: a stored NaN or infinite rate is refused on restore,
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
			if err := b.Put([]byte(fmt.Sprint("k", i)), v); err != nil {
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

// Issue 8 item 10: a flood of new keys never evicts a key over or near
// its limit; when nothing is evictable, new keys are refused and counted.
func TestMemoryFloodKeepsOffender(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{MaxKeys: 1000})
	lim := hourlyExp
	m.SetProtect(func(_ string, s ratelimit.State) bool { return lim.Rate(s, t0) >= ProtectFraction*lim.Limit })
	over := burst(lim, ratelimit.State{}, t0, 20)
	m.Update(ctx, "hourly", "mallory", set(over))
	for i := range 1500 {
		if err := m.Update(ctx, "hourly", fmt.Sprint("flood", i), set(ratelimit.State{Time: t0.UnixNano(), Rate: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := m.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("offender evicted by the flood: %v", s)
	}
	if m.Evicted() == 0 {
		t.Fatal("nothing evicted")
	}
	// Fill every shard with protected keys: new keys are refused.
	refused := 0
	for i := range 5000 {
		err := m.Update(ctx, "hourly", fmt.Sprint("hot", i), set(over))
		if errors.Is(err, ErrKeyPressure) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused == 0 || m.Refused() != int64(refused) {
		t.Fatalf("refused %d, Refused() = %d", refused, m.Refused())
	}
	if s, _ := m.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("offender evicted by protected keys: %v", s)
	}
	checkInvariants(t, m)
}

// The same through Persistent, whose protection uses the limit parameters.
func TestPersistentFloodKeepsOffender(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	p := newPersistent(t, db, MemoryOptions{MaxKeys: 1000}, PersistOptions{
		Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: func() time.Time { return t0 }})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "mallory", set(over))
	for i := range 1500 {
		p.Update(ctx, "hourly", fmt.Sprint("flood", i), set(burst(hourlyExp, ratelimit.State{}, t0, 1)))
	}
	if s, _ := p.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("offender evicted by the flood: %v", s)
	}
	p.Close()
}

// Issue 8 item 4: NewPersistent on a file whose data pages are zeroed
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
	f.Add([]byte{recordFormat, 6, 'h', 'o', 'u', 'r', 'l', 'y', 0, 0, 0, 1, 2, 'k', 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{recordFormat, 1, 'x', 0, 0, 0, 2, 3, 'a'})
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

// Issue 8 item 3: a failed compaction is logged with its cause, counted,
// and recorded as the last error, while flushes go on.
func TestPersistentCompactionFailureLoud(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	var logs mtatest.SyncBuffer
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{FlushInterval: 5 * time.Millisecond,
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
		return j.Put(binary.BigEndian.AppendUint64(nil, 1<<62), []byte{recordFormat + 1})
	}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	for i := 0; p.Stats().CompactionFailures == 0; i++ {
		p.Update(ctx, "hourly", fmt.Sprint("k", i), set(ratelimit.State{Time: t0.UnixNano(), Rate: 1}))
		if i > 20000 {
			t.Fatal("no compaction failed")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if !strings.Contains(st.LastError, "journal record format 2") || st.LastErrorAt.IsZero() || st.Flushes == 0 || st.LastFlushAt.IsZero() {
		t.Errorf("stats after a failed compaction: %+v", st)
	}
	if l := logs.String(); !strings.Contains(l, "rate journal compaction failed") || !strings.Contains(l, "journal record format 2") {
		t.Errorf("not logged with its cause:\n%s", l)
	}
	p.Close()
}

// BenchmarkReconfigureConvert measures a reload from exponential to gcra
// over 100,000 states, half of them refused (each of which takes a
// bisection): every request waits for it.
func BenchmarkReconfigureConvert(b *testing.B) {
	db, _ := openDB(b, filepath.Join(b.TempDir(), "ratelimitd.db"))
	now := func() time.Time { return t0.Add(time.Minute) }
	exp := map[string]ratelimit.Limit{"hourly": hourlyExp}
	p := newPersistent(b, db, MemoryOptions{}, PersistOptions{Limits: exp, Now: now})
	defer p.Close()
	const n = 100_000
	states := make([]ratelimit.State, 20)
	for i := range states {
		states[i] = burst(hourlyExp, ratelimit.State{}, t0, i+1) // 11 and more are refused
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		p.Reconfigure(exp, func() error { return nil })
		for i := range n {
			p.Update(context.Background(), "hourly", fmt.Sprintf("user%06d", i), set(states[i%20]))
		}
		b.StartTimer()
		p.Reconfigure(map[string]ratelimit.Limit{"hourly": hourlyGCRA}, func() error { return nil })
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/state")
}

// The stored parameters of a baseline limit (factor, floor, learning
// period) survive a restart: nothing is converted or rewritten.
func TestPersistentBaselineParamsRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	base := ratelimit.Limit{Limit: 100, Period: time.Hour, Algorithm: ratelimit.Baseline, Factor: 4, Floor: 5, LearnPeriod: 7 * 24 * time.Hour}
	limits := map[string]ratelimit.Limit{"usual": base}
	var logs bytes.Buffer
	for range 2 {
		db, closeDB := openDB(t, path)
		p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: limits, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		p.Update(context.Background(), "usual", "uma", set(ratelimit.State{Time: time.Now().UnixNano(), Rate: ratelimit.PackBaseline(3, 2)}))
		if l, ok := p.Params("usual"); !ok || l != base || p.Stats().Converted != 0 {
			t.Fatalf("Params = %v, %v; converted %d", l, ok, p.Stats().Converted)
		}
		p.Close()
		closeDB()
	}
	if strings.Contains(logs.String(), "malformed") || strings.Contains(logs.String(), "converted") {
		t.Errorf("logs: %s", logs.String())
	}
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
