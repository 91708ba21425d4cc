package ratestore

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// openDB opens a BoltDB file for a test. The returned close function (also
// run at cleanup, once) checks the file's consistency first.
func openDB(t testing.TB, path string) (*bbolt.DB, func()) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closeDB := func() {
		once.Do(func() {
			checkDB(t, db)
			if err := db.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
	}
	t.Cleanup(closeDB)
	return db, closeDB
}

// checkDB runs BoltDB's consistency check.
func checkDB(t testing.TB, db *bbolt.DB) {
	t.Helper()
	err := db.View(func(tx *bbolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("bolt check: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// stored returns every state stored: the snapshot with the journal
// applied (decoded here independently of compaction).
func stored(t testing.TB, db *bbolt.DB) map[pair]ratelimit.State {
	t.Helper()
	out := map[pair]ratelimit.State{}
	err := db.View(func(tx *bbolt.Tx) error {
		if root := tx.Bucket(bucketName); root != nil {
			err := root.ForEachBucket(func(name []byte) error {
				return root.Bucket(name).ForEach(func(k, v []byte) error {
					cell, err := openCell(k, v)
					if err != nil {
						t.Errorf("%s/%q: %v", name, k, err)
						return nil
					}
					s, ok := decodeState(cell)
					if !ok {
						t.Errorf("%s/%q: malformed value %x", name, k, v)
					}
					out[pair{string(name), string(k)}] = s
					return nil
				})
			})
			if err != nil {
				return err
			}
		}
		j := tx.Bucket(journalName)
		if j == nil {
			return nil
		}
		return j.ForEach(func(seq, v []byte) error {
			v, err := recordBody(seq, v)
			if err != nil {
				return err
			}
			return decodeRecord(v, func(name []byte, _, off, n int, del bool) error {
				k := pair{string(name), string(v[off : off+n])}
				if del {
					delete(out, k)
					return nil
				}
				s, ok := decodeState(v[off+n : off+n+valueLen])
				if !ok {
					t.Errorf("journal %x: %s/%q: malformed state", seq, k[0], k[1])
				}
				out[k] = s
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// journalLen returns the number of records in the journal.
func journalLen(t testing.TB, db *bbolt.DB) int {
	t.Helper()
	n := 0
	if err := db.View(func(tx *bbolt.Tx) error {
		if j := tx.Bucket(journalName); j != nil {
			n = j.Stats().KeyN
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// compactCheck compacts the journal of db with p and checks that the
// stored state did not change and the journal is empty.
func compactCheck(t *testing.T, p *Persistent, db *bbolt.DB) {
	t.Helper()
	before := stored(t, db)
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	equalStates(t, "after compaction", stored(t, db), before)
	if n := journalLen(t, db); n != 0 {
		t.Errorf("%d journal records after compaction", n)
	}
}

func newPersistent(t testing.TB, db *bbolt.DB, mopts MemoryOptions, popts PersistOptions) *Persistent {
	t.Helper()
	p, err := NewPersistent(db, NewMemory(mopts), popts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPersistentRestore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	// The quarantine shares the file; its buckets are left alone.
	if err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket([]byte("quarantine/meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("id1"), []byte("{}"))
	}); err != nil {
		t.Fatal(err)
	}
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 5000 {
		k := fmt.Sprintf("user%07d", i)
		p.Update(ctx, "hourly", k, set(ratelimit.State{Time: rng.Int64(), Rate: rng.Float64() * 1000}))
		if i%3 == 0 {
			p.Update(ctx, "daily", k, set(ratelimit.State{Time: rng.Int64(), Rate: rng.NormFloat64()}))
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 { // changed after a flush, written by Close
		p.Update(ctx, "hourly", fmt.Sprintf("user%07d", i), set(ratelimit.State{Time: int64(i), Rate: 0.5}))
	}
	want := contents(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
	equalStates(t, "stored", stored(t, db), want)
	closeDB()

	db, _ = openDB(t, path)
	p2 := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	equalStates(t, "restored", contents(t, p2), want)
	if st := p2.Stats(); st.Restored != int64(len(want)) || st.Dropped != 0 {
		t.Errorf("stats after restore: %+v, want Restored %d", st, len(want))
	}
	// Restoring writes nothing back.
	n := 0
	p2.Memory().TakeDirty(func(string, string, ratelimit.State) { n++ }, func(string, string) { n++ })
	if n != 0 {
		t.Errorf("restore left %d changes to flush", n)
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket([]byte("quarantine/meta")).Get([]byte("id1")); string(v) != "{}" {
			t.Errorf("quarantine bucket changed: %q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestPersistentDelete(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	for _, k := range []string{"alice", "bob", "carol", "dave"} {
		p.Update(ctx, "hourly", k, set(ratelimit.State{Time: 10, Rate: 50}))
		p.Update(ctx, "daily", k, set(ratelimit.State{Time: 10, Rate: 60}))
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	// An operator's reset is on disk when Delete returns.
	if ok, err := p.Delete(ctx, "hourly", "alice"); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	if _, ok := stored(t, db)[pair{"hourly", "alice"}]; ok {
		t.Error("hourly/alice still stored after Delete returned")
	}
	if ok, _ := p.Delete(ctx, "hourly", "nobody"); ok {
		t.Error("Delete of an unknown key reported state")
	}
	// Deleted and re-created between flushes: the re-created state wins.
	p.mem.Delete(ctx, "hourly", "bob")
	p.Update(ctx, "hourly", "bob", set(ratelimit.State{Time: 20, Rate: 1}))
	// Re-created and deleted again: gone.
	p.mem.Delete(ctx, "daily", "carol")
	p.Update(ctx, "daily", "carol", set(ratelimit.State{Time: 20, Rate: 1}))
	p.mem.Delete(ctx, "daily", "carol")
	// Deleted before ever being flushed.
	p.Update(ctx, "daily", "erin", set(ratelimit.State{Time: 20, Rate: 1}))
	p.mem.Delete(ctx, "daily", "erin")
	// Every key of a limit deleted.
	for _, k := range []string{"alice", "bob", "carol", "dave"} {
		p.mem.Delete(ctx, "weekly", k)
	}
	want := contents(t, p)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	closeDB()

	db, _ = openDB(t, path)
	p2 := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	got := contents(t, p2)
	equalStates(t, "restored", got, want)
	for _, k := range []pair{{"hourly", "alice"}, {"daily", "carol"}, {"daily", "erin"}} {
		if _, ok := got[k]; ok {
			t.Errorf("%s/%s came back after reopen", k[0], k[1])
		}
	}
	if s := got[pair{"hourly", "bob"}]; s.Time != 20 {
		t.Errorf("hourly/bob = %v, want the re-created state", s)
	}
}

// TestPersistentJournal restores from a journal alone, then from a
// compacted snapshot, then from both, with deletions in the journal of
// keys in the snapshot.
func TestPersistentJournal(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	rng := rand.New(rand.NewPCG(1, 1))
	update := func(prefix string, n int) {
		for range n {
			k := fmt.Sprint(prefix, rng.IntN(3000))
			p.Update(ctx, []string{"hourly", "daily"}[rng.IntN(2)], k, set(ratelimit.State{Time: rng.Int64(), Rate: rng.Float64()}))
		}
	}
	for range 5 {
		update("user", 2000)
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	reopen := func(what string, wantJournal bool) {
		t.Helper()
		want := contents(t, p)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		n := journalLen(t, db)
		if (n > 0) != wantJournal {
			t.Errorf("%s: %d journal records", what, n)
		}
		equalStates(t, what+": stored", stored(t, db), want)
		closeDB()
		db, closeDB = openDB(t, path)
		p = newPersistent(t, db, MemoryOptions{}, PersistOptions{})
		equalStates(t, what+": restored", contents(t, p), want)
		// Restoring writes nothing: the journal is compacted later.
		if m := journalLen(t, db); m != n {
			t.Errorf("%s: %d journal records after restore, want %d", what, m, n)
		}
		if st := p.Stats(); (st.Journal > 0) != wantJournal || st.Compactions != 0 {
			t.Errorf("%s: stats after restore %+v", what, st)
		}
		compactCheck(t, p, db)
		equalStates(t, what+": compacted", stored(t, db), want)
		if st := p.Stats(); st.Journal != 0 || st.Compactions != int64(min(n, 1)) {
			t.Errorf("%s: stats after compaction %+v", what, st)
		}
		p.stats.Compactions = 0
	}
	if st := p.Stats(); st.Compactions != 0 || st.Journal == 0 || st.Flushes != 5 {
		t.Errorf("stats %+v, want 5 flushes, a journal, no compaction", st)
	}
	reopen("journal only", true)

	// Compacting at every flush, in pieces of 100 keys.
	p.compactMin, p.compactPerPair, p.pieceKeys = 0, 0, 100
	for range 3 {
		update("user", 2000)
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		if !p.compactDue() {
			t.Error("compaction not due")
		}
		if err := p.compact(nil); err != nil {
			t.Fatal(err)
		}
		if p.compactDue() {
			t.Error("compaction due after a compaction")
		}
	}
	if st := p.Stats(); st.Compactions != 3 || st.Journal != 0 {
		t.Errorf("stats %+v, want 3 compactions, no journal", st)
	}
	reopen("compacted", false)

	// Deletions in the journal of keys in the snapshot, among changes.
	var deleted []pair
	p.Range(ctx, func(limit, key string, _ ratelimit.State) bool {
		if len(deleted) < 100 {
			deleted = append(deleted, pair{limit, key})
		}
		return true
	})
	for i, k := range deleted {
		if i%2 == 0 {
			if ok, err := p.Delete(ctx, k[0], k[1]); !ok || err != nil {
				t.Fatalf("Delete(%s) = %v, %v", k, ok, err)
			}
		} else {
			p.mem.Delete(ctx, k[0], k[1])
		}
		update("other", 10)
	}
	update("user", 500)
	reopen("snapshot and journal", true)
	got := contents(t, p)
	n := 0
	for _, k := range deleted {
		if _, ok := got[k]; !ok {
			n++
		}
	}
	if n < len(deleted)*3/4 { // update("user") re-creates about 1 in 12
		t.Errorf("%d of %d deleted keys stayed deleted", n, len(deleted))
	}
}

// TestPersistentCompactionInterrupted stops compactions after some of
// their pieces, as a crash would, with flushes between the pieces, and
// checks that the file restores the exact state and compacts again.
func TestPersistentCompactionInterrupted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	rng := rand.New(rand.NewPCG(3, 3))
	v := int64(0)
	update := func(n int) {
		for range n {
			v++
			k := fmt.Sprint("user", rng.IntN(2000))
			p.Update(ctx, []string{"hourly", "daily", "weekly"}[rng.IntN(3)], k, set(ratelimit.State{Time: v, Rate: float64(v)}))
		}
	}
	flush := func() {
		t.Helper()
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	update(3000)
	flush()
	compactCheck(t, p, db) // a snapshot
	for round, k := range []int{1, 3, 7} {
		for range 4 {
			update(1500)
			for range 20 { // deletions in the journal of keys in the snapshot
				p.mem.Delete(ctx, "daily", fmt.Sprint("user", rng.IntN(2000)))
			}
			flush()
		}
		before := journalLen(t, db)
		p.pieceKeys = 100
		pieces := 0
		p.afterPiece = func(i int) bool {
			pieces++
			// A flush between two pieces appends records the
			// compaction must keep.
			update(50)
			p.mem.Delete(ctx, "hourly", fmt.Sprint("user", rng.IntN(2000)))
			flush()
			return i+1 < k
		}
		if err := p.compact(nil); !errors.Is(err, errCompactionStopped) {
			t.Fatalf("round %d: compact = %v, want stopped", round, err)
		}
		if pieces != k {
			t.Errorf("round %d: %d pieces applied, want %d", round, pieces, k)
		}
		want := contents(t, p)
		equalStates(t, "stored after an interrupted compaction", stored(t, db), want)
		if n := journalLen(t, db); n != before+k {
			t.Errorf("round %d: %d journal records, want %d", round, n, before+k)
		}
		if st := p.Stats(); st.Compactions != 1 {
			t.Errorf("round %d: %d compactions, want 1", round, st.Compactions)
		}
		p.afterPiece = nil
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		closeDB()

		db, closeDB = openDB(t, path)
		p = newPersistent(t, db, MemoryOptions{}, PersistOptions{})
		equalStates(t, "restored after an interrupted compaction", contents(t, p), want)
		if round == 2 {
			compactCheck(t, p, db)
			equalStates(t, "compacted", stored(t, db), want)
		}
		p.stats.Compactions = 1
	}
}

// journalRecord returns the sealed journal record, under seq, of count
// entries (as its header says) and the groups given.
func journalRecord(seq uint64, count uint16, groups []byte) []byte {
	payload := binary.BigEndian.AppendUint16(nil, count)
	return statedb.Seal(nil, binary.BigEndian.AppendUint64(nil, seq), recordVersion, append(payload, groups...))
}

// TestPersistentJournalMalformed refuses a journal record that does not
// decode though its checksum matches (not written by this package), naming
// it, restores the rest with SkipLost, and refuses one of an unknown
// format.
func TestPersistentJournalMalformed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	p.Update(ctx, "hourly", "alice", set(ratelimit.State{Time: 1, Rate: 1}))
	p.Close()
	put := func(seq uint64, v []byte) {
		t.Helper()
		if err := db.Update(func(tx *bbolt.Tx) error {
			return tx.Bucket(journalName).Put(binary.BigEndian.AppendUint64(nil, seq), v)
		}); err != nil {
			t.Fatal(err)
		}
	}
	put(1000, journalRecord(1000, 1, []byte{6, 'h', 'o', 'u', 'r', 'l', 'y', 0, 0, 0, 1, 10, 'b'})) // truncated
	closeDB()
	db, closeDB = openDB(t, path)
	_, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{})
	if !errors.Is(err, statedb.ErrRecordsLost) || !strings.Contains(err.Error(), `ratejournal/"\x00\x00\x00\x00\x00\x00\x03\xe8"`) {
		t.Errorf("NewPersistent with a malformed record: %v", err)
	}
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{ReadOnly: true, SkipLost: true})
	equalStates(t, "restored", contents(t, p), map[pair]ratelimit.State{{"hourly", "alice"}: {Time: 1, Rate: 1}})
	if st := p.Stats(); st.Lost != 1 || st.LostKeys != 1 {
		t.Errorf("stats: %d records, %d keys lost, want 1, 1", st.Lost, st.LostKeys)
	}
	p.Close()
	put(1000, statedb.Seal(nil, binary.BigEndian.AppendUint64(nil, 1000), recordVersion+1, nil))
	closeDB()
	db, _ = openDB(t, path)
	if _, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{}); !errors.Is(err, ErrVersion) {
		t.Errorf("NewPersistent with a record of format %d = %v, want ErrVersion", recordVersion+1, err)
	}
}

// TestPersistentJournalMalformedPartly: a journal record that is
// malformed after a valid entry is refused whole (collect counted its
// entries before it found the fault); once set aside (the operator's
// decision), the records around it are restored and compacted.
func TestPersistentJournalMalformedPartly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	p.Update(ctx, "hourly", "alice", set(ratelimit.State{Time: 1, Rate: 1}))
	p.Close()
	state := appendState(nil, ratelimit.State{Time: 2, Rate: 2})
	record := func(seq uint64, count byte, keys ...string) []byte {
		v := []byte{6, 'h', 'o', 'u', 'r', 'l', 'y', 0, 0, 0, count}
		for _, k := range keys {
			v = append(append(append(v, byte(len(k)<<1)), k...), state...)
		}
		if count > byte(len(keys)) {
			v = append(v, 10, 'b')
		}
		return journalRecord(seq, uint16(count), v)
	}
	// Written as the store writes records (counted in the manifest).
	if err := statedb.Update(db, func(tx *bbolt.Tx, m *statedb.Tally) error {
		j := tx.Bucket(journalName)
		if err := m.Append(j, journalPath, binary.BigEndian.AppendUint64(nil, 1000), record(1000, 2, "bob")); err != nil {
			return err
		}
		return m.Append(j, journalPath, binary.BigEndian.AppendUint64(nil, 1001), record(1001, 2, "carol", "dave"))
	}); err != nil {
		t.Fatal(err)
	}
	want := map[pair]ratelimit.State{{"hourly", "alice"}: {Time: 1, Rate: 1},
		{"hourly", "carol"}: {Time: 2, Rate: 2}, {"hourly", "dave"}: {Time: 2, Rate: 2}}
	closeDB()
	db, closeDB = openDB(t, path)
	if _, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{}); !errors.Is(err, statedb.ErrRecordsLost) {
		t.Fatalf("NewPersistent with a malformed record: %v", err)
	}
	lost, _, err := statedb.Scan(db, Formats())
	if err != nil || len(lost) != 1 {
		t.Fatalf("scan: %v %v", lost, err)
	}
	if err := statedb.SetAside(db, Formats(), lost); err != nil {
		t.Fatal(err)
	}
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	equalStates(t, "restored", contents(t, p), want)
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	if n := journalLen(t, db); n != 0 {
		t.Errorf("%d journal records after compaction", n)
	}
	equalStates(t, "stored after compaction", stored(t, db), want)
	p.Close()
}

func TestPersistentNegligible(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	// GCRA states are negligible once now is past their Time.
	var now atomic.Int64
	now.Store(1000)
	opts := PersistOptions{
		Now:    func() time.Time { return time.Unix(0, now.Load()) },
		Limits: map[string]ratelimit.Limit{"gcra": hourlyGCRA, "fast": hourlyGCRA},
	}
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, opts)
	for i := range 1000 {
		p.Update(ctx, "gcra", fmt.Sprint("k", i), set(ratelimit.State{Time: int64(1000 + i)}))
	}
	for i := range 10 { // a limit whose states all decay
		p.Update(ctx, "fast", fmt.Sprint("k", i), set(ratelimit.State{Time: 1001}))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(stored(t, db)); n != 1010 {
		t.Fatalf("%d states stored, want 1010", n)
	}
	closeDB()

	// Restart later: states with Time <= 1500 are not restored and are
	// deleted from the file (more than 4096 of them would not fit
	// here, so use a smaller world and check the count).
	now.Store(1500)
	db, closeDB = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, opts)
	if got, want := p.Memory().Len(), 499; got != want {
		t.Errorf("restored %d states, want %d", got, want)
	}
	if st := p.Stats(); st.Dropped != 511 {
		t.Errorf("Dropped = %d, want 511", st.Dropped)
	}
	if got := stored(t, db); len(got) != 499 {
		t.Errorf("%d states stored after restore, want 499", len(got))
	}
	if err := db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketName).Bucket([]byte("fast")) != nil {
			t.Error("emptied bucket of limit fast kept")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Sweep later still: dropped from memory, and from the file at the
	// next flush.
	now.Store(1900)
	if n := p.Sweep(); n != 400 {
		t.Errorf("Sweep = %d, want 400", n)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	want := contents(t, p)
	if len(want) != 99 {
		t.Errorf("%d states after sweep, want 99", len(want))
	}
	equalStates(t, "stored after sweep", stored(t, db), want)
	p.Close()
	closeDB()
}

// TestPersistentRestoreManyDropped drops more states at restore than are
// deleted in one chunk.
func TestPersistentRestoreManyDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	const n = 3*4096 + 17
	for i := range n {
		s := ratelimit.State{Time: 1} // negligible under GCRA at t0 unless i%3 == 1
		if i%3 == 1 {
			s.Time = t0.Add(time.Minute).UnixNano()
		}
		p.Update(context.Background(), "hourly", fmt.Sprintf("k%06d", i), set(s))
	}
	p.Close()
	closeDB()
	db, _ = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{
		Limits: map[string]ratelimit.Limit{"hourly": hourlyGCRA}, Now: func() time.Time { return t0 },
	})
	want := contents(t, p)
	if len(want) != (n+1)/3 { // i%3 == 1
		t.Errorf("restored %d, want %d", len(want), (n+1)/3)
	}
	equalStates(t, "stored", stored(t, db), want)
}

func TestPersistentEvictionPersisted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	p := newPersistent(t, db, MemoryOptions{MaxKeys: 64 * 4}, PersistOptions{})
	for i := range 5000 {
		p.Update(ctx, "hourly", fmt.Sprint("random", i), set(ratelimit.State{Time: int64(i + 1), Rate: 1}))
		if i%100 == 0 {
			if err := p.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if p.Memory().Evicted() == 0 {
		t.Fatal("nothing evicted")
	}
	want := contents(t, p)
	equalStates(t, "stored", stored(t, db), want)
	p.Close()
	closeDB()

	// Restoring into a smaller store respects its bound, and the
	// evictions are persisted too.
	db, _ = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{MaxKeys: 64}, PersistOptions{})
	if n := p.Memory().Len(); n > 64 {
		t.Errorf("restored %d states into MaxKeys 64", n)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	equalStates(t, "stored after restore", stored(t, db), contents(t, p))
}

// TestPersistentConcurrent updates from many goroutines while Tick flushes
// and sweeps and callers flush and delete; run it with -race.
func TestPersistentConcurrent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	// GCRA states of Time t0 are negligible at t0 (swept), later ones not.
	p := newPersistent(t, db, MemoryOptions{MaxKeys: 64 * 16}, PersistOptions{
		Limits: map[string]ratelimit.Limit{"hourly": hourlyGCRA, "daily": hourlyGCRA}, Now: func() time.Time { return t0 },
	})
	p.sweepEvery = 3 * time.Millisecond
	stop := flushEvery(time.Millisecond, func(_ string, err error) { t.Error(err) }, p.Tick)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprint("u", (g*31+i)%1500)
				switch i % 50 {
				case 0:
					if _, err := p.Delete(ctx, "hourly", k); err != nil {
						t.Error(err)
					}
				case 1:
					if err := p.Flush(); err != nil {
						t.Error(err)
					}
				default:
					err := p.Update(ctx, []string{"hourly", "daily"}[i%2], k, func(s ratelimit.State) (ratelimit.State, bool) {
						if i%10 == 7 {
							return ratelimit.State{Time: t0.UnixNano()}, true
						}
						return ratelimit.State{Time: t0.UnixNano() + int64(i%10+1)}, true
					})
					if err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	stop()
	want := contents(t, p)
	equalStates(t, "stored", stored(t, db), want)
	if st := p.Stats(); st.Flushes == 0 || st.Failures != 0 {
		t.Errorf("stats %+v", st)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	compactCheck(t, p, db)
	closeDB()
	// A new Memory shards keys differently, so restore without a bound.
	db, _ = openDB(t, path)
	equalStates(t, "restored", contents(t, newPersistent(t, db, MemoryOptions{}, PersistOptions{})), want)
}

func TestPersistentUnpersistable(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	s := ratelimit.State{Time: 1, Rate: 1}
	p.Update(ctx, "hourly", "", set(s))           // empty key
	p.Update(ctx, "", "alice", set(s))            // empty limit name
	p.Update(ctx, "\x00version", "alice", set(s)) // would clash with the version key
	p.Update(ctx, "hourly", "alice", set(s))
	if err := p.Update(ctx, "hourly", strings.Repeat("x", MaxKeyLen+1), set(s)); !errors.Is(err, ErrKeyTooLong) {
		t.Errorf("Update of a long key = %v, want ErrKeyTooLong", err)
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Skipped != 3 || st.Written != 1 {
		t.Errorf("stats %+v, want 3 skipped, 1 written", st)
	}
	equalStates(t, "stored", stored(t, db), map[pair]ratelimit.State{{"hourly", "alice"}: s})
	if len(contents(t, p)) != 4 {
		t.Error("unpersistable states not kept in memory")
	}
}

func TestPersistentVersion(t *testing.T) {
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	if err := db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucket(bucketName)
		if err != nil {
			return err
		}
		return b.Put(versionKey, []byte("2"))
	}); err != nil {
		t.Fatal(err)
	}
	_, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{})
	if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), `format "2"`) || !strings.Contains(err.Error(), "move the file aside") {
		t.Errorf("NewPersistent = %v, want ErrVersion naming format 2 and the way out", err)
	}
}

func TestBatchCompact(t *testing.T) {
	var b batch
	st := func(i int) ratelimit.State { return ratelimit.State{Time: int64(i)} }
	b.add(1, []byte("b"), st(1), false)
	b.add(0, []byte("z"), st(2), false)
	b.add(1, []byte("a"), st(3), false)
	b.add(1, []byte("b"), ratelimit.State{}, true)
	b.add(1, []byte("a"), ratelimit.State{}, true)
	b.add(1, []byte("a"), st(4), false)
	b.compact()
	var got []string
	for _, r := range b.recs {
		got = append(got, fmt.Sprintf("%d/%s=%d,%v", r.lim, b.key(r), r.state.Time, r.del))
	}
	if want := "0/z=2,false 1/a=4,false 1/b=0,true"; strings.Join(got, " ") != want {
		t.Errorf("compact = %q, want %q", strings.Join(got, " "), want)
	}
}

func TestBatchGroup(t *testing.T) {
	var b batch
	st := func(i int) ratelimit.State { return ratelimit.State{Time: int64(i)} }
	b.add(1, []byte("b"), st(1), false)
	b.add(0, []byte("z"), st(2), false)
	b.add(1, []byte("a"), st(3), false)
	b.add(2, []byte("b"), ratelimit.State{}, true)
	b.add(1, []byte("b"), ratelimit.State{}, true)
	b.add(0, []byte("a"), st(4), false)
	b.group()
	var got []string
	for _, r := range b.recs {
		got = append(got, fmt.Sprintf("%d/%s=%d,%v", r.lim, b.key(r), r.state.Time, r.del))
	}
	if want := "0/z=2,false 0/a=4,false 1/b=1,false 1/a=3,false 1/b=0,true 2/b=0,true"; strings.Join(got, " ") != want {
		t.Errorf("group = %q, want %q", strings.Join(got, " "), want)
	}
}

const crashEnv = "RATELIMITD_STORE_CRASH_CHILD"

// TestBatchReset checks that a flush's batch keeps its arrays for the next
// flush under a steady load of more than 65,536 changes, and drops them
// when the load falls.
func TestBatchReset(t *testing.T) {
	var b batch
	fill := func(n int) {
		for i := range n {
			b.add(uint16(i%2), fmt.Appendf(nil, "user%07d", i), ratelimit.State{Time: 1}, false)
		}
		b.group()
	}
	fill(100_000)
	b.reset()
	kept := cap(b.recs)
	if kept < 100_000 {
		t.Fatalf("after a flush of 100,000 changes: cap %d", kept)
	}
	fill(90_000)
	if cap(b.recs) != kept && cap(b.spare) != kept {
		t.Errorf("a flush of 90,000 changes grew the batch again: cap %d, was %d", cap(b.recs), kept)
	}
	b.reset()
	fill(10)
	b.reset()
	if cap(b.recs) > 1<<16 || cap(b.spare) > 1<<16 || cap(b.keys) > 1<<20 {
		t.Errorf("after a flush of 10 changes: cap %d, %d, keys %d", cap(b.recs), cap(b.spare), cap(b.keys))
	}
}

// TestPersistentCrashBound checks the crash bound: a child process updates
// keys with increasing values while Run flushes every few milliseconds,
// and reports on stdout each committed flush with the value every key had
// reached when that flush took the changes. It is killed with SIGKILL at a
// random moment; after reopening, every key's state must be at least as
// new as the last flush reported. Three rounds run on the same file, each
// child continuing from what it restored.
func TestPersistentCrashBound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts subprocesses")
	}
	t.Run("journal", func(t *testing.T) { testCrashBound(t, false) })
	// A journal of 32 KiB at most, compacted in pieces of 150 keys: the
	// child starts a compaction every few flushes, which runs beside
	// them, so the kill often lands in a compaction, between two pieces.
	t.Run("compacting", func(t *testing.T) { testCrashBound(t, true) })
}

func testCrashBound(t *testing.T, compacting bool) {
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	last := int64(0)
	for round := range 3 {
		flushes := 10 + round*7
		if compacting {
			// A compaction runs beside the flushes for several of them.
			flushes *= 3
		}
		reported, compactions := runCrashChild(t, path, flushes, compacting)
		if compacting && compactions < 3 {
			t.Errorf("round %d: child compacted %d times, want several", round, compactions)
		}
		if reported < last {
			t.Fatalf("round %d: child reported %d after restoring %d", round, reported, last)
		}
		db, closeDB := openDB(t, path)
		got := stored(t, db)
		if len(got) != 2*crashKeys {
			t.Errorf("round %d: %d states stored, want %d", round, len(got), 2*crashKeys)
		}
		minV := int64(-1)
		for k, s := range got {
			if s.Time < reported || s.Rate != float64(s.Time) {
				t.Errorf("round %d: %s/%s = %v, older than the last reported flush %d", round, k[0], k[1], s, reported)
			}
			if minV < 0 || s.Time < minV {
				minV = s.Time
			}
		}
		t.Logf("round %d: last reported flush %d, oldest stored value %d, %d compactions", round, reported, minV, compactions)
		closeDB()
		last = reported
	}
}

const (
	crashKeys       = 300
	crashCompactEnv = "RATELIMITD_STORE_CRASH_COMPACT"
)

// runCrashChild starts the child on path, kills it with SIGKILL after it
// reported flushes flushes (and a random pause), and returns the last value
// it reported and the compactions it reported; compacting makes it compact
// every few flushes.
func runCrashChild(t *testing.T, path string, flushes int, compacting bool) (reported int64, compactions int) {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	if compacting {
		cmd.Env = append(cmd.Env, crashCompactEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timeout := time.AfterFunc(20*time.Second, func() { cmd.Process.Kill() })
	defer timeout.Stop()
	reported = -1
	seen := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if !strings.HasPrefix(sc.Text(), "flushed ") {
			continue // the test framework's own output
		}
		var n int64
		if _, err := fmt.Sscanf(sc.Text(), "flushed %d %d", &n, &compactions); err != nil {
			t.Fatalf("child: %q: %v", sc.Text(), err)
		}
		reported = n
		if seen++; seen == flushes {
			go func() {
				time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
				cmd.Process.Kill() // SIGKILL
			}()
		}
	}
	err = cmd.Wait()
	if seen < flushes {
		t.Fatalf("child exited after %d flushes: %v", seen, err)
	}
	if err == nil {
		t.Fatal("child exited normally; want killed")
	}
	return reported, compactions
}

// crashChild is the child of TestPersistentCrashBound, started by TestMain.
// It never returns.
func crashChild(path string) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		os.Exit(2)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		fail(err)
	}
	p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{})
	if err != nil {
		fail(err)
	}
	if os.Getenv(crashCompactEnv) != "" {
		p.compactMin, p.compactPerPair, p.pieceKeys = 32<<10, 0, 150
	}
	start := int64(0)
	p.Range(context.Background(), func(_, _ string, s ratelimit.State) bool {
		start = max(start, s.Time)
		return true
	})
	// applied is the value every key has reached in memory.
	var applied atomic.Int64
	applied.Store(start)
	var taken int64
	p.beforeTake = func() { taken = applied.Load() }
	p.afterFlush = func(int) { fmt.Printf("flushed %d %d\n", taken, p.stats.Compactions) }
	flushEvery(2*time.Millisecond, func(_ string, err error) { fail(err) }, p.Tick)
	ctx := context.Background()
	keys := benchKeys(crashKeys)
	for v := start + 1; ; v++ {
		s := ratelimit.State{Time: v, Rate: float64(v)}
		for _, k := range keys {
			if err := p.Update(ctx, "hourly", k, set(s)); err != nil {
				fail(err)
			}
			if err := p.Update(ctx, "daily", k, set(s)); err != nil {
				fail(err)
			}
		}
		applied.Store(v)
	}
}

// BenchmarkFlush10k flushes 10,000 changed keys (5,000 users under two
// limits) of a store of 200,000 pairs, with an fsync'd commit.
func BenchmarkFlush10k(b *testing.B) {
	ctx := context.Background()
	db, _ := openDB(b, filepath.Join(b.TempDir(), "ratelimitd.db"))
	p := newPersistent(b, db, MemoryOptions{}, PersistOptions{})
	keys := benchKeys(100_000)
	for _, k := range keys {
		p.Update(ctx, "hourly", k, set(ratelimit.State{Time: 1, Rate: 1}))
		p.Update(ctx, "daily", k, set(ratelimit.State{Time: 1, Rate: 1}))
	}
	if err := p.Flush(); err != nil {
		b.Fatal(err)
	}
	v := int64(1)
	for b.Loop() {
		b.StopTimer()
		v++
		for i := range 5000 {
			k := keys[(int(v)*5000+i*7919)%len(keys)]
			p.Update(ctx, "hourly", k, set(ratelimit.State{Time: v, Rate: 1}))
			p.Update(ctx, "daily", k, set(ratelimit.State{Time: v, Rate: 1}))
		}
		b.StartTimer()
		if err := p.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFlushRandom100k flushes the changes of 20,000 users chosen at
// random out of 100,000 stored ones, under two limits (40,000 changed keys
// of 200,000 pairs), with an fsync'd commit: a daemon's flush under load.
// Compactions, when due, run after the flush (as Run starts them) and count
// in its time; run it with enough iterations (-benchtime 60x) to amortise
// them.
func BenchmarkFlushRandom100k(b *testing.B) { benchFlushRandom(b, 100_000, 20_000) }

// BenchmarkFlushRandom100kBusy is BenchmarkFlushRandom100k with 40,000
// users changed per flush (some 66,000 distinct changed keys), as
// ratelimitd-bench's load of 40,000 messages/s from 100,000 users.
func BenchmarkFlushRandom100kBusy(b *testing.B) { benchFlushRandom(b, 100_000, 40_000) }

func benchFlushRandom(b *testing.B, users, changed int) {
	ctx := context.Background()
	db, _ := openDB(b, filepath.Join(b.TempDir(), "ratelimitd.db"))
	p := newPersistent(b, db, MemoryOptions{}, PersistOptions{})
	keys := benchKeys(users)
	for _, k := range keys {
		p.Update(ctx, "hourly", k, set(ratelimit.State{Time: 1, Rate: 1}))
		p.Update(ctx, "daily", k, set(ratelimit.State{Time: 1, Rate: 1}))
	}
	if err := p.Flush(); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	v := int64(1)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		v++
		for range changed {
			k := keys[rng.IntN(users)]
			p.Update(ctx, "hourly", k, set(ratelimit.State{Time: v, Rate: 1}))
			p.Update(ctx, "daily", k, set(ratelimit.State{Time: v, Rate: 2}))
		}
		b.StartTimer()
		if err := p.Flush(); err != nil {
			b.Fatal(err)
		}
		if p.compactDue() {
			if err := p.compact(nil); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkPersist2M writes 1,000,000 users under two limits to BoltDB
// (in random order, 20 flushes), then restores them in a fresh process, as
// a restarted daemon would, and reports the file's bytes per pair, the
// restore time and that process's resident memory after the restore
// (Linux): Go heap (RssAnon) and BoltDB's mapping (RssFile).
func BenchmarkPersist2M(b *testing.B) {
	const users = 1_000_000
	ctx := context.Background()
	for b.Loop() {
		path := filepath.Join(b.TempDir(), "ratelimitd.db")
		db, closeDB := openDB(b, path)
		db.NoSync = true // the file is measured, not fsync
		p := newPersistent(b, db, MemoryOptions{}, PersistOptions{})
		keys := benchKeys(users)
		for n, i := range rand.Perm(users) {
			s := ratelimit.State{Time: int64(i), Rate: 1}
			p.Update(ctx, "hourly", keys[i], set(s))
			p.Update(ctx, "daily", keys[i], set(s))
			if n%(users/20) == 0 {
				if err := p.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := p.Close(); err != nil {
			b.Fatal(err)
		}
		closeDB()
		fi, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(fi.Size())/(2*users), "file-B/pair")

		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), rssEnv+"="+path)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			b.Fatalf("restore child: %v", err)
		}
		var r rssReport
		if _, err := fmt.Sscan(string(out), &r.pairs, &r.restore, &r.heap, &r.anon, &r.file); err != nil {
			b.Fatalf("restore child: %q: %v", out, err)
		}
		if r.pairs != 2*users {
			b.Fatalf("restored %d pairs", r.pairs)
		}
		b.ReportMetric(r.restore.Seconds()*1000, "restore-ms")
		b.ReportMetric(float64(r.heap)/(1<<20), "heap-MiB")
		b.ReportMetric(float64(r.anon+r.file)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(r.file)/(1<<20), "rss-file-MiB")
	}
}

const rssEnv = "RATELIMITD_STORE_RSS_CHILD"

type rssReport struct {
	pairs      int
	restore    time.Duration
	heap       uint64
	anon, file uint64 // bytes
}

// rssChild restores the file at path into a new Persistent and prints an
// rssReport.
func rssChild(path string) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	start := time.Now()
	p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	restore := time.Since(start)
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var anon, file uint64
	if status, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[2] == "kB" {
				n, _ := strconv.ParseUint(f[1], 10, 64)
				switch f[0] {
				case "RssAnon:":
					anon = n << 10
				case "RssFile:":
					file = n << 10
				}
			}
		}
	}
	fmt.Println(p.Memory().Len(), int64(restore), ms.HeapAlloc, anon, file)
	runtime.KeepAlive(p)
}

// compactBench is a store of 100,000 users under two limits (200,000
// pairs, keys as ratelimitd-bench's sasl_username) whose journal is
// filled with flushes of 20,000 users chosen at random: what a daemon
// under load compacts every few seconds.
type compactBench struct {
	p    *Persistent
	db   *bbolt.DB
	keys []string
	rng  *rand.Rand
	v    int64
}

func newCompactBench(b *testing.B) *compactBench {
	const users = 100_000
	ctx := context.Background()
	db, _ := openDB(b, filepath.Join(b.TempDir(), "ratelimitd.db"))
	db.NoSync = true // the CPU of a compaction is measured, not fsync
	c := &compactBench{p: newPersistent(b, db, MemoryOptions{}, PersistOptions{}), db: db,
		keys: make([]string, users), rng: rand.New(rand.NewPCG(1, 2)), v: 1}
	for i := range c.keys {
		c.keys[i] = fmt.Sprintf("user%07d@example.org", i)
		c.p.Update(ctx, "hourly", c.keys[i], set(ratelimit.State{Time: 1, Rate: 1}))
		c.p.Update(ctx, "daily", c.keys[i], set(ratelimit.State{Time: 1, Rate: 1}))
	}
	if err := c.p.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := c.p.compact(nil); err != nil {
		b.Fatal(err)
	}
	return c
}

// fill flushes changes of random users until the journal holds size
// bytes.
func (c *compactBench) fill(b *testing.B, size int64) {
	ctx := context.Background()
	for c.p.Stats().Journal < size {
		c.v++
		for range 20_000 {
			k := c.keys[c.rng.IntN(len(c.keys))]
			c.p.Update(ctx, "hourly", k, set(ratelimit.State{Time: c.v, Rate: 1}))
			c.p.Update(ctx, "daily", k, set(ratelimit.State{Time: c.v, Rate: 2}))
		}
		if err := c.p.Flush(); err != nil {
			b.Fatal(err)
		}
	}
}

// entries returns the number of entries in the journal.
func (c *compactBench) entries(b *testing.B) int {
	n := 0
	err := c.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(journalName).ForEach(func(k, v []byte) error {
			body, err := recordBody(k, v)
			if err != nil {
				return err
			}
			return decodeRecord(body, func([]byte, int, int, int, bool) error { n++; return nil })
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkCompact compacts a journal of 16, 32 (compactMinBytes) or 64
// MiB (some 400,000 entries of 200,000 pairs per 16 MiB; compactBench)
// into the snapshot, without fsync; ns/entry is per journal entry: the
// compaction's share of the cost of each change a flush writes.
func BenchmarkCompact(b *testing.B) {
	for _, mib := range []int64{16, 32, 64} {
		b.Run(fmt.Sprintf("journal-%dMiB", mib), func(b *testing.B) {
			c := newCompactBench(b)
			var d time.Duration
			entries := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c.fill(b, mib<<20)
				entries += c.entries(b)
				b.StartTimer()
				start := time.Now()
				if err := c.p.compact(nil); err != nil {
					b.Fatal(err)
				}
				d += time.Since(start)
			}
			b.ReportMetric(float64(d.Nanoseconds())/float64(entries), "ns/entry")
		})
	}
}

// BenchmarkCollect reads, sorts and deduplicates a 16 MiB journal of
// BenchmarkCompact (collect), the first step of a compaction and of a
// restore; ns/entry is per journal entry.
func BenchmarkCollect(b *testing.B) {
	c := newCompactBench(b)
	c.fill(b, 16<<20)
	entries := c.entries(b)
	b.ReportAllocs()
	for b.Loop() {
		err := c.p.db.View(func(tx *bbolt.Tx) error {
			var cp compaction
			return c.p.collect(tx, &cp)
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*entries), "ns/entry")
}

// TestCollectOrder checks collect against a plain sort of the journal's
// entries: the last entry of each (limit, key), in limit and key order.
// The keys are drawn from a small alphabet including NUL, with shared
// prefixes longer than 8 bytes past the one all keys share and keys that
// are prefixes of others, so that many keys tie on jentry.pre, every path
// of sortEntries runs (radix passes, insertion sorts, runs of equal pre
// longer than radixMin) and dedup meets runs of several keys.
func TestCollectOrder(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	rng := rand.New(rand.NewPCG(3, 4))
	key := func() string {
		b := []byte("shared-prefix:")
		if rng.IntN(4) == 0 {
			b = append(b, "0123456789abcdef"...) // ties on pre
		}
		for range rng.IntN(12) {
			b = append(b, "\x00ab"[rng.IntN(3)])
		}
		return string(b)
	}
	limits := []string{"hourly", "daily", "weekly"}
	for range 8 {
		for range 3000 {
			p.Update(ctx, limits[rng.IntN(len(limits))], key(), set(ratelimit.State{Time: rng.Int64N(1 << 40), Rate: 1}))
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		for range 20 { // deletions, flushed one by one
			if _, err := p.Delete(ctx, limits[rng.IntN(len(limits))], key()); err != nil {
				t.Fatal(err)
			}
		}
	}
	type entry struct {
		lim, key string
		rec, off int
		del      bool
		state    string
	}
	var want []entry
	var c compaction
	err := db.View(func(tx *bbolt.Tx) error {
		last := map[[2]string]entry{}
		rec := 0
		err := tx.Bucket(journalName).ForEach(func(seq, v []byte) error {
			v, err := recordBody(seq, v)
			if err != nil {
				return err
			}
			err = decodeRecord(v, func(name []byte, at, off, n int, del bool) error {
				e := entry{lim: string(name), key: string(v[off : off+n]), rec: rec, off: at, del: del}
				if !del {
					e.state = string(v[off+n : off+n+valueLen])
				}
				last[[2]string{e.lim, e.key}] = e
				return nil
			})
			rec++
			return err
		})
		if err != nil {
			return err
		}
		for _, e := range last {
			want = append(want, e)
		}
		if err := p.collect(tx, &c); err != nil {
			return err
		}
		index := map[string]int{}
		for i, name := range c.names {
			index[name] = i
		}
		slices.SortFunc(want, func(x, y entry) int {
			return cmp.Or(cmp.Compare(index[x.lim], index[y.lim]), strings.Compare(x.key, y.key))
		})
		var got []entry
		for lim := range c.names {
			for _, e := range c.limitEntries(lim) {
				k, s, del := c.entry(e)
				got = append(got, entry{lim: c.names[lim], key: string(k), rec: int(e.rec), off: int(e.off), del: del, state: string(s)})
			}
		}
		if len(got) != len(c.ents) || len(got) != len(want) {
			t.Fatalf("collect: %d entries (%d by limit), want %d", len(c.ents), len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("entry %d: got %+v, want %+v", i, got[i], want[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(want) < 1000 {
		t.Fatalf("only %d distinct keys", len(want))
	}
}

// A flush and a compaction yield the CPU while they work (so that with
// GOMAXPROCS 1 requests do not wait for them up to Go's 10 ms
// preemption): a flush between the store's shards, never holding a
// shard's lock, and every yieldEntries changes while encoding; a
// compaction for every journal record it reads and every yieldEntries
// entries it sorts and applies. The stored state is the same.
func TestFlushAndCompactionYield(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	yields, locked := 0, 0
	p.yield = func() {
		yields++
		for i := range p.mem.shards {
			if !p.mem.shards[i].mu.TryLock() {
				locked++
				continue
			}
			p.mem.shards[i].mu.Unlock()
		}
	}
	const keys = 3 * yieldEntries
	lim := ratelimit.Limit{Limit: 10, Period: time.Hour}
	now := time.Unix(1_790_000_000, 0)
	update := func() {
		for i := range keys {
			if err := p.Update(ctx, "hourly", fmt.Sprintf("user%06d", i), func(s ratelimit.State) (ratelimit.State, bool) {
				r := lim.Check(s, now, 1)
				return lim.Next(r, true)
			}); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(time.Second)
	}
	update()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	// One yield between each two of the 64 shards, and 3 while encoding
	// the 3*4096 changes.
	if want := numShards - 1 + 3; yields != want {
		t.Errorf("a flush of %d changes yielded %d times, want %d", keys, yields, want)
	}
	if locked > 0 {
		t.Errorf("a flush yielded %d times with a shard locked", locked)
	}
	update()
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	records := journalLen(t, db)
	yields = 0
	compactCheck(t, p, db)
	// Each record is read twice; the 3*4096 keys (10,000 of them
	// sharing their first digit) are sorted, deduplicated and applied in
	// one piece.
	if min := 2*records + 1 + 3 + 3; yields < min {
		t.Errorf("a compaction of %d records of %d entries yielded %d times, want at least %d", records, keys, yields, min)
	}
}

// TestWorking checks Persistent.Working, which the daemon adds to its soft
// memory limit: a flush of n changes keeps arrays of at least 32 bytes per
// change for the next flush, a flush with nothing to write gives them up,
// and a running compaction adds its journal index (16 bytes per entry),
// which it gives up when it ends.
func TestWorking(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	if w := p.Working(); w != 0 {
		t.Errorf("Working = %d before any flush, want 0", w)
	}
	const n = 20_000
	for i := range n {
		p.Update(ctx, []string{"hourly", "daily"}[i%2], fmt.Sprint("user", i), set(ratelimit.State{Time: 1, Rate: 1}))
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := p.Working()
	if flushed < 32*n {
		t.Errorf("Working = %d after a flush of %d changes, want at least %d", flushed, n, 32*n)
	}
	var during int64
	p.afterPiece = func(int) bool {
		during = p.Working()
		return true
	}
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	if during < flushed+16*n {
		t.Errorf("Working = %d during a compaction of %d entries, want at least %d", during, n, flushed+16*n)
	}
	if w := p.Working(); w != flushed {
		t.Errorf("Working = %d after the compaction, want the flush's %d", w, flushed)
	}
	if err := p.Flush(); err != nil { // nothing changed
		t.Fatal(err)
	}
	if w := p.Working(); w != 0 {
		t.Errorf("Working = %d after a flush with nothing to write, want 0", w)
	}
}
