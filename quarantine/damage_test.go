package quarantine

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// damageRecord flips one bit of the stored record of entry id, keeping
// its length (as a bad sector would).
func damageRecord(t *testing.T, db *bolt.DB, id string) {
	t.Helper()
	err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketMeta)
		v := bytes.Clone(b.Get([]byte(id)))
		v[len(v)/2] ^= 0x04
		return b.Put([]byte(id), v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDamagedEntryKept: an entry whose record fails its checksum is
// reported, never dropped, and its message never deleted: Get refuses it, List and Expire skip it, Stats names it, the scan of the
// records reports it, and only SetAside (the operator's decision) moves
// it into quarantine/damaged, byte for byte, its message kept.
func TestDamagedEntryKept(t *testing.T) {
	clock := &testClock{t: epoch}
	s, db, _ := newStore(t, Options{Now: clock.Now})
	var ids []string
	for i := range 3 {
		id, err := freeze(s, &Entry{Key: "alice", Limit: "hourly"}, testMessage("m"+strconv.Itoa(i), "body"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	damaged := ids[1]
	if err := s.MarkThawed(damaged, "", ""); err != nil { // an audit record: Expire's to remove
		t.Fatal(err)
	}
	// Frozen again for the body check below: freeze a fourth, damage it.
	id4, _ := freeze(s, &Entry{Key: "alice"}, testMessage("m4", "body"))
	damageRecord(t, db, damaged)
	damageRecord(t, db, id4)

	if _, err := s.Get(damaged); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Get of a damaged entry: %v", err)
	}
	if _, err := s.Message(id4); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Message of a damaged entry: %v", err)
	}
	es, err := s.List(Filter{States: []State{Held, Frozen, Thawed, Deleted}})
	if err != nil || len(es) != 2 {
		t.Errorf("List: %d entries, %v; want the 2 readable ones", len(es), err)
	}
	st, err := s.Stats()
	if err != nil || strings.Join(st.DamagedIDs, " ") != damaged+" "+id4 {
		t.Errorf("Stats: %+v %v", st, err)
	}
	clock.Advance(400 * 24 * time.Hour)
	if n, _, err := s.Expire(clock.Now(), time.Hour); err != nil || n != 0 {
		t.Errorf("Expire: %d removed, %v", n, err)
	}
	if _, err := s.Get(ids[0]); err != nil {
		t.Errorf("a sound entry: %v", err)
	}
	lost, _, err := statedb.Scan(db, Formats())
	if err != nil || len(lost) != 2 || lost[0].Path[0] != string(bucketMeta) {
		t.Fatalf("scan: %v %v", lost, err)
	}
	var raw []byte
	db.View(func(tx *bolt.Tx) error {
		raw = bytes.Clone(tx.Bucket(bucketMeta).Get([]byte(id4)))
		return nil
	})
	if err := statedb.SetAside(db, Formats(), lost); err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		if got := tx.Bucket(bucketDamaged).Get([]byte(id4)); !bytes.Equal(got, raw) {
			t.Errorf("set aside: %q, want the record byte for byte", got)
		}
		if tx.Bucket(bucketMessages).Get([]byte(id4)) == nil {
			t.Error("the message of a set-aside entry was deleted")
		}
		if n := tx.Bucket(bucketDamaged).Stats().KeyN; n != 2 {
			t.Errorf("%d records set aside, want 2", n)
		}
		return nil
	})
	if lost, _, err := statedb.Scan(db, Formats()); err != nil || len(lost) > 0 {
		t.Errorf("scan after SetAside: %v %v", lost, err)
	}
	if st, _ := s.Stats(); len(st.DamagedIDs) != 0 {
		t.Errorf("Stats after SetAside: %+v", st)
	}
}

// TestCheckMessagesFindsDamagedBody: state check compares every frozen
// message with its SHA-256.
func TestCheckMessagesFindsDamagedBody(t *testing.T) {
	s, db, _ := newStore(t, Options{})
	id, _ := freeze(s, &Entry{}, testMessage("x", "original"))
	freeze(s, &Entry{}, testMessage("y", "sound"))
	var out strings.Builder
	if bad, err := CheckMessages(&out, db); err != nil || len(bad) != 0 {
		t.Fatalf("sound messages: %v %v", bad, err)
	}
	flipMessageByte(t, db, id, -3)
	out.Reset()
	bad, err := CheckMessages(&out, db)
	if err != nil || len(bad) != 1 || !strings.Contains(bad[0], id) {
		t.Errorf("a damaged message: %v %v\n%s", bad, err, out.String())
	}
	// Restore for the cleanup check.
	flipMessageByte(t, db, id, -3)
}
