package quarantine

import (
	"bytes"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// testClock is a settable clock for Options.Now.
type testClock struct{ t time.Time }

func (c *testClock) Now() time.Time { return c.t }

func (c *testClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// openDB opens (creating) a BoltDB file. When the test ends the handle is
// closed and the file reopened and checked: bbolt's own consistency check
// plus the quarantine's invariants.
func openDB(t testing.TB, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close() // closing twice is harmless
		checkFile(t, path)
	})
	return db
}

// newStore returns a Store on a fresh database in t.TempDir().
func newStore(t testing.TB, opts Options) (*Store, *bolt.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db := openDB(t, path)
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, db, path
}

// openFile opens the state file at path as the daemon (ro false) or the
// CLI (ro true) does and returns a Store on it; close db to reopen.
func openFile(t testing.TB, path string, ro bool) (*Store, *bolt.DB) {
	t.Helper()
	db, err := statedb.Open(path, ro, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(db, Options{})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return s, db
}

// checkFile reopens path and checks it.
func checkFile(t testing.TB, path string) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: true})
	if err != nil {
		t.Errorf("reopen %s for check: %v", path, err)
		return
	}
	defer db.Close()
	checkDB(t, db)
}

// checkDB runs bbolt's consistency check and verifies the quarantine's
// invariants: every record reads and every bucket matches its manifest
// entry (statedb.Scan), every message belongs to a frozen entry and
// matches its hash and size, every frozen entry has a message, the byte
// total is right, the instance index matches the entries, IDs match their
// keys. A message whose entry was set aside (quarantine/damaged) has no
// entry.
func checkDB(t testing.TB, db *bolt.DB) {
	t.Helper()
	if lost, _, err := statedb.Scan(db, Formats()); err != nil || len(lost) > 0 {
		t.Errorf("scan: %v %v", lost, err)
	}
	err := db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			t.Errorf("bbolt check: %v", err)
		}
		b := bucketsOf(tx)
		if !b.ok() {
			return nil // never initialised
		}
		var total int64
		err := b.messages.ForEach(func(k, _ []byte) error {
			msg, err := b.readMessage(string(k))
			if err != nil {
				return err
			}
			total += int64(len(msg))
			e, err := b.get(string(k))
			if d := tx.Bucket(bucketDamaged); err != nil && d != nil && d.Get(k) != nil {
				return nil // its entry set aside unreadable: the message is kept
			}
			if err != nil || e.State != Frozen && e.State != Thawed {
				return fmt.Errorf("message %s without frozen or thawed entry: %v %v", k, e.State, err)
			}
			return checkMessage(&e, msg)
		})
		if err != nil {
			return err
		}
		if got := getBytes(b.info); got != total {
			t.Errorf("byte counter %d, bodies total %d", got, total)
		}
		indexed := map[string]bool{}
		err = b.inst.ForEach(func(k, _ []byte) error {
			i := bytes.IndexByte(k, 0)
			inst, id := string(k[:i]), string(k[i+1:])
			e, err := b.get(id)
			if err != nil {
				return fmt.Errorf("index %q -> %s: %w", inst, id, err)
			}
			if e.Instance != inst {
				return fmt.Errorf("index %q -> %s has instance %q", inst, id, e.Instance)
			}
			indexed[id] = true
			return nil
		})
		if err != nil {
			return err
		}
		return b.meta.ForEach(func(k, v []byte) error {
			var e Entry
			if err := decodeRecord(k, v, &e); err != nil {
				return fmt.Errorf("entry %s: %w", k, err)
			}
			if e.ID != string(k) {
				return fmt.Errorf("entry under %s has ID %s", k, e.ID)
			}
			if msg, _ := b.readMessage(string(k)); e.State == Frozen && msg == nil {
				return fmt.Errorf("frozen entry %s has no body", k)
			}
			if e.Instance != "" && !indexed[e.ID] {
				return fmt.Errorf("entry %s not in the instance index", k)
			}
			return nil
		})
	})
	if err != nil {
		t.Error(err)
	}
}

// flipMessageByte flips one bit of byte i of the first chunk of id's
// stored message.
func flipMessageByte(t testing.TB, db *bolt.DB, id string, i int) {
	t.Helper()
	err := db.Update(func(tx *bolt.Tx) error {
		ref, _ := parseChunkRef(tx.Bucket(bucketMessages).Get([]byte(id)))
		b := tx.Bucket(bucketChunks)
		v := bytes.Clone(b.Get(chunkKey(ref.token, 0)))
		v[(i+len(v))%len(v)] ^= 1
		return b.Put(chunkKey(ref.token, 0), v)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testMessage returns a small RFC 5322 message.
func testMessage(subject, body string) []byte {
	return []byte("From: Alice <alice@example.com>\r\n" +
		"To: bob@example.org\r\n" +
		"Subject: " + subject + "\r\n" +
		"Message-ID: <" + subject + "@example.com>\r\n" +
		"Date: Sun, 01 Mar 2026 12:00:00 +0000\r\n" +
		"\r\n" + body + "\r\n")
}

// hold records e as a new held entry (RecordHold); a refused queue ID is
// ErrDuplicateQueueID.
func hold(s *Store, e *Entry) (string, error) {
	r, err := s.RecordHold(e, false)
	return recordedID(r, err)
}

// freeze is hold for RecordFreeze of msg.
func freeze(s *Store, e *Entry, msg []byte) (string, error) {
	r, err := s.RecordFreeze(e, bytes.NewReader(msg))
	return recordedID(r, err)
}

func recordedID(r Recorded, err error) (string, error) {
	switch {
	case err == nil && r.Added:
		err = fmt.Errorf("added to held entry %s, not recorded", r.ID)
	case err == nil && r.RefusedQueueID != "":
		err = ErrDuplicateQueueID
	}
	return r.ID, err
}
