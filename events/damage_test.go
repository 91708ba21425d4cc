package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// TestDamagedEventReported: every event is a checksummed record; one bit
// flipped in an event's rate (which any decoder reads as a rate) is
// found by the scan of the records and by Query, and the log's buckets
// match their manifest entries.
func TestDamagedEventReported(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	for i := range 50 {
		l.Record(refusal(fmt.Sprint("user", i), t0.Add(time.Duration(i)*time.Second), 300))
	}
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	if lost, _, err := statedb.Scan(l.db, Formats()); err != nil || len(lost) > 0 {
		t.Fatalf("an undamaged log: %v %v", lost, err)
	}
	key := recordKey(classDecision, t0.Add(7*time.Second), 8)
	err := l.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketLog)
		v := bytes.Clone(b.Get(key))
		if v == nil {
			return errors.New("event not found")
		}
		v[len(v)-4-16+2] ^= 0x10 // a bit of the rate
		return b.Put(key, v)
	})
	if err != nil {
		t.Fatal(err)
	}
	lost, _, err := statedb.Scan(l.db, Formats())
	if err != nil || len(lost) != 1 || !bytes.Equal(lost[0].Key, key) {
		t.Fatalf("scan: %v %v", lost, err)
	}
	if _, err := l.Query(context.Background(), Query{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Query = %v, want ErrCorrupt", err)
	}
	if err := statedb.SetAside(l.db, Formats(), lost); err != nil {
		t.Fatal(err)
	}
	if es, err := l.Query(context.Background(), Query{}); err != nil || len(es) != 49 {
		t.Errorf("after SetAside: %d events, %v", len(es), err)
	}
}

// TestOtherFormatRefused: a log of another format is refused, not read.
func TestOtherFormatRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		tx.CreateBucket(bucketLog)
		mb, _ := tx.CreateBucket(bucketMeta)
		return mb.Put(metaFormat, []byte{1})
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(openDB(t, path, false), Options{}); err == nil || !strings.Contains(err.Error(), "format 01") {
		t.Errorf("Open of a log of format 1 = %v, want it refused", err)
	}
}
