package ratestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Damage inside the records of a state file: whatever the damage, the
// file is either restored with every state equal to the undamaged file's,
// or refused (statedb.ErrDamaged, naming the unreadable records and the
// ways out); never a panic, never a silent difference.

var damageLimits = map[string]ratelimit.Limit{
	"hourly": {Limit: 200, Period: time.Hour},
	"daily":  {Algorithm: ratelimit.GCRA, Limit: 1000, Period: 24 * time.Hour},
}

// writeDamageFile writes a state file of users keys per limit: the first
// half compacted into the snapshot, the rest and changes of the first in
// the journal; offender keys ("offender-...") have high rates.
func writeDamageFile(t testing.TB, path string, users int) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := func() time.Time { return t0 }
	p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{Limits: damageLimits, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(from, to int, rate float64) {
		for i := from; i < to; i++ {
			for limit := range damageLimits {
				s := ratelimit.State{Time: t0.UnixNano(), Rate: rate + float64(i%7)}
				if limit == "daily" {
					s = ratelimit.State{Time: t0.Add(time.Duration(i+1) * time.Minute).UnixNano()}
				}
				p.Update(ctx, limit, fmt.Sprintf("user%06d@example.org", i), set(s))
			}
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	put(0, users/2, 50)
	for limit := range damageLimits {
		p.Update(ctx, limit, "offender-in-snapshot", set(ratelimit.State{Time: t0.UnixNano(), Rate: 5000}))
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	put(users/2, users, 20)
	put(0, users/10, 80)
	for limit := range damageLimits {
		p.Update(ctx, limit, "offender-in-journal", set(ratelimit.State{Time: t0.UnixNano(), Rate: 6000}))
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// restoreResult opens path as serve does (statedb.Open, a scan of every
// record, NewPersistent) and returns the states restored, or the error
// that refused the file. A panic fails the test.
func restoreResult(t testing.TB, path string) (map[pair]ratelimit.State, error) {
	t.Helper()
	db, err := statedb.Open(path, false, 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	lost, _, err := statedb.Scan(db, Formats())
	if err != nil {
		return nil, statedb.Damaged(path, err)
	}
	if len(lost) > 0 {
		return nil, statedb.RecordsLost(path, lost)
	}
	p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{Limits: damageLimits,
		Now: func() time.Time { return t0 }})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return contents(t, p), nil
}

// judge checks the outcome of one damage: refused with the message, or
// every state equal. It returns a line for the damage table.
func judge(t *testing.T, path string, want map[pair]ratelimit.State) string {
	t.Helper()
	got, err := restoreResult(t, path)
	checkErr := statedb.Check(io.Discard, path, Formats(), nil)
	if err != nil {
		if !errors.Is(err, statedb.ErrDamaged) {
			t.Fatalf("refused without ErrDamaged: %v", err)
		}
		for _, s := range []string{path, "state check"} {
			if !bytes.Contains([]byte(err.Error()), []byte(s)) {
				t.Errorf("the refusal lacks %q: %v", s, err)
			}
		}
		if errors.Is(err, statedb.ErrRecordsLost) && !bytes.Contains([]byte(err.Error()), []byte("--accept-state-loss")) {
			t.Errorf("the refusal does not name --accept-state-loss: %v", err)
		}
		if checkErr == nil {
			t.Errorf("serve refused (%v), state check says OK", err)
		}
		kind := "page guard"
		if errors.Is(err, statedb.ErrRecordsLost) {
			kind = "unreadable records"
		}
		return fmt.Sprintf("serve refused (%s), state check exit 1", kind)
	}
	equalStates(t, "restored from the damaged file", got, want)
	if checkErr != nil {
		t.Errorf("serve restored everything, state check: %v", checkErr)
	}
	return fmt.Sprintf("restored all %d states, state check OK", len(got))
}

// TestRecordDamage damages a state file of 2 limits x 3,000 keys in each
// way below and checks that it is restored completely or refused.
func TestRecordDamage(t *testing.T) {
	dir := t.TempDir()
	clean := filepath.Join(dir, "clean.db")
	writeDamageFile(t, clean, 3000)
	image, err := os.ReadFile(clean)
	if err != nil {
		t.Fatal(err)
	}
	undamaged := filepath.Join(dir, "undamaged.db")
	if err := os.WriteFile(undamaged, image, 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := restoreResult(t, undamaged) // which may write to it
	if err != nil {
		t.Fatal(err)
	}
	// Where records lie in the file.
	var journalRec, offenderCell, offenderJournal []byte
	db, _ := bbolt.Open(clean, 0o600, &bbolt.Options{ReadOnly: true})
	db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(journalName).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if journalRec == nil && len(v) > 32<<10 {
				journalRec = bytes.Clone(v)
			}
			if bytes.Contains(v, []byte("offender-in-journal")) {
				offenderJournal = bytes.Clone(v)
			}
		}
		offenderCell = bytes.Clone(tx.Bucket(bucketName).Bucket([]byte("hourly")).Get([]byte("offender-in-snapshot")))
		return nil
	})
	db.Close()
	at := func(v []byte) int {
		i := bytes.Index(image, v)
		if v == nil || i < 0 {
			t.Fatal("record not found in the file")
		}
		return i
	}
	jAt, cellAt, ojAt := at(journalRec), at(offenderCell), at(offenderJournal)
	keyAt := bytes.Index(image, []byte("offender-in-snapshot"))
	ps := os.Getpagesize()
	rnd := rand.New(rand.NewPCG(3, 4))
	kinds := []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"64 KiB of random bytes at the middle", func(b []byte) []byte {
			mid := len(b) / 2
			for i := mid; i < mid+64<<10 && i < len(b); i++ {
				b[i] = byte(rnd.Uint32())
			}
			return b
		}},
		{"8 KiB of random bytes inside a large journal record", func(b []byte) []byte {
			for i := jAt + 1000; i < jAt+9000; i++ {
				b[i] = byte(rnd.Uint32())
			}
			return b
		}},
		{"one bit of a journal record's count", func(b []byte) []byte { b[jAt+2] ^= 1; return b }},
		{"one bit of an offender's rate (snapshot)", func(b []byte) []byte { b[cellAt+1+8+3] ^= 0x10; return b }},
		{"one bit of an offender's time (journal)", func(b []byte) []byte {
			i := ojAt + bytes.Index(offenderJournal, []byte("offender-in-journal")) + len("offender-in-journal")
			b[i+2] ^= 4
			return b
		}},
		{"one byte of a key (snapshot)", func(b []byte) []byte {
			b[keyAt+3] = 'X'
			return b
		}},
		{"a journal record's first byte", func(b []byte) []byte { b[jAt] = 147; return b }},
		{"one journal overflow page zeroed", func(b []byte) []byte {
			pg := (jAt/ps + 2) * ps
			clear(b[pg : pg+ps])
			return b
		}},
		{"meta pages damaged", func(b []byte) []byte {
			for i := 20; i < 64; i++ {
				b[i] ^= 0x5a
				b[ps+i] ^= 0x5a
			}
			return b
		}},
		{"free list damaged", func(b []byte) []byte {
			fl := int(binary.LittleEndian.Uint64(b[16+40:]))
			if fl*ps+24 < len(b) {
				binary.LittleEndian.PutUint16(b[fl*ps+10:], 0xffff)
			}
			return b
		}},
		{"truncated to half", func(b []byte) []byte { return b[:len(b)/2] }},
		{"zeroed tail", func(b []byte) []byte { clear(b[len(b)-len(b)/4:]); return b }},
		{"0-byte file", func([]byte) []byte { return nil }},
		// Damage no record's checksum sees: found by the page check
		// and the manifest.
		{"one bit of the journal bucket's name", func(b []byte) []byte {
			b[liveElement(t, b, nil, journalName)+3] ^= 1
			return b
		}},
		{"one bit of a limit bucket's name", func(b []byte) []byte {
			b[liveElement(t, b, [][]byte{bucketName}, []byte("hourly"))+1] ^= 1
			return b
		}},
		{"the journal's sequence behind its keys", func(b []byte) []byte {
			seq := liveElement(t, b, nil, journalName) + len(journalName) + 8
			b[seq] ^= 0x02 // the low byte (little-endian)
			return b
		}},
		{"one bit of a leaf page's element count (records hidden)", func(b []byte) []byte {
			pg := liveLeaf(t, b, [][]byte{bucketName, []byte("hourly")}, []byte("user001000@example.org"))
			count := binary.LittleEndian.Uint16(b[pg+10:])
			binary.LittleEndian.PutUint16(b[pg+10:], count&(count-1))
			return b
		}},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ratelimitd.db")
			if err := os.WriteFile(path, k.damage(bytes.Clone(image)), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %s", k.name, judge(t, path, want))
		})
	}
	t.Run("a directory at the path", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ratelimitd.db")
		os.Mkdir(path, 0o700)
		if _, err := restoreResult(t, path); err == nil {
			t.Fatal("a directory opened as a state file")
		} else {
			t.Logf("a directory at the path: refused: %v", err)
		}
	})
}

// smallImage is a small state file (2 limits x 40 keys), written once.
var smallImage = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "ratestore-small")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "small.db")
	writeDamageFile(&testing.T{}, path, 40)
	return os.ReadFile(path)
})

// FuzzStateBitFlip flips one bit (at a fuzzed offset, over every byte of
// a small state file past its two meta pages) and checks that the file is
// restored with every state equal or refused, never with a panic or a
// silent difference. (A flip in the newer meta page makes BoltDB fall
// back to the previous transaction, as after a torn write at a crash: one
// flush interval, the crash bound; state check and serve report it,
// statedb.MetaFallback; TestRecordDamage damages both.)
// Each execution opens a BoltDB file, so scripts/fuzz.sh runs it 20,000
// times.
// fuzz.sh: 20000x
func FuzzStateBitFlip(f *testing.F) {
	image, err := smallImage()
	if err != nil {
		f.Fatal(err)
	}
	ps := os.Getpagesize()
	for _, off := range []uint32{0, 20, 64, 100, uint32(len(image)/2 - 2*ps), uint32(len(image) - 2*ps - 200)} {
		f.Add(off, uint8(3))
	}
	dir := f.TempDir()
	undamaged := filepath.Join(dir, "undamaged.db")
	os.WriteFile(undamaged, image, 0o600)
	want, err := restoreResult(f, undamaged)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, off uint32, bit uint8) {
		b := bytes.Clone(image)
		at := 2*ps + int(off)%(len(b)-2*ps)
		b[at] ^= 1 << (bit % 8)
		path := filepath.Join(t.TempDir(), "ratelimitd.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := restoreResult(t, path)
		if err != nil {
			if !errors.Is(err, statedb.ErrDamaged) {
				t.Fatalf("flip at %d: refused without ErrDamaged: %v", at, err)
			}
			return
		}
		equalStates(t, fmt.Sprintf("restored after a flip at byte %d", at), got, want)
	})
}

// liveLeaf returns the offset in the BoltDB file b of the leaf page of the
// live tree (the latest valid meta page's) that holds key in the bucket at
// path (nested bucket names, from the top).
func liveLeaf(t *testing.T, b []byte, path [][]byte, key []byte) int {
	t.Helper()
	ps := os.Getpagesize()
	meta := 0
	if binary.LittleEndian.Uint64(b[ps+16+48:]) > binary.LittleEndian.Uint64(b[16+48:]) {
		meta = ps
	}
	page := int(binary.LittleEndian.Uint64(b[meta+16+16:])) * ps // the root bucket's
	for _, name := range append(path, nil) {
		target := name
		if name == nil {
			target = key
		}
		// Down the branch pages to the leaf that may hold target.
		for binary.LittleEndian.Uint16(b[page+8:]) == 0x01 {
			count, child := int(binary.LittleEndian.Uint16(b[page+10:])), uint64(0)
			for i := range count {
				e := page + 16 + i*16
				pos, ksize := int(binary.LittleEndian.Uint32(b[e:])), int(binary.LittleEndian.Uint32(b[e+4:]))
				if i > 0 && bytes.Compare(b[e+pos:e+pos+ksize], target) > 0 {
					break
				}
				child = binary.LittleEndian.Uint64(b[e+8:])
			}
			page = int(child) * ps
		}
		if name == nil {
			return page
		}
		at := leafKey(t, b, page, name)
		root := binary.LittleEndian.Uint64(b[at+len(name):])
		if root == 0 {
			t.Fatalf("bucket %s is inline", name)
		}
		page = int(root) * ps
	}
	return page
}

// leafKey returns the offset of key in the leaf page at offset page of b.
func leafKey(t *testing.T, b []byte, page int, key []byte) int {
	t.Helper()
	for i := range int(binary.LittleEndian.Uint16(b[page+10:])) {
		e := page + 16 + i*16
		pos, ksize := int(binary.LittleEndian.Uint32(b[e+4:])), int(binary.LittleEndian.Uint32(b[e+8:]))
		if bytes.Equal(b[e+pos:e+pos+ksize], key) {
			return e + pos
		}
	}
	t.Fatalf("%q not in the leaf page at %d", key, page)
	return 0
}

// liveElement returns the offset in b of the name of the bucket name,
// nested in the bucket at path, in the live tree.
func liveElement(t *testing.T, b []byte, path [][]byte, name []byte) int {
	t.Helper()
	return leafKey(t, b, liveLeaf(t, b, path, name), name)
}
