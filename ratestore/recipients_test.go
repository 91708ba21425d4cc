package ratestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

var rt0 = time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)

// Recipients survive a restart through the "rcptsets" bucket; expired
// sets are not restored and their entries are deleted by the next flush.
func TestRecipientsPersist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	db, closeDB := openDB(t, path)
	ctx := context.Background()
	r, err := OpenRecipients(db, rt0, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 { // past AddrExactMax: a filter
		r.Add(ctx, "uniq", "alice", ratelimit.HashAddr(fmt.Sprintf("r%d@example.org", i)), rt0, time.Hour, 400)
	}
	r.Add(ctx, "uniq", "bob", ratelimit.HashAddr("x@example.org"), rt0, time.Hour, 400)
	r.Add(ctx, "daily", "carol", ratelimit.HashAddr("y@example.org"), rt0, 24*time.Hour, 400)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Flush(); err != ErrClosed {
		t.Errorf("Flush after Close: %v", err)
	}
	pairs, _ := storedRecipientPairs(db)
	if want := []string{"daily|carol", "uniq|alice", "uniq|bob"}; !slices.Equal(pairs, want) {
		t.Fatalf("stored %v, want %v", pairs, want)
	}
	closeDB()

	db, _ = openDB(t, path)
	later := rt0.Add(3 * time.Hour) // the hourly sets have expired
	r2, err := OpenRecipients(db, later, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Len() != 1 {
		t.Errorf("restored %d pairs, want 1 (carol's daily set)", r2.Len())
	}
	if ok, _ := r2.Seen(ctx, "daily", "carol", ratelimit.HashAddr("y@example.org"), later, 24*time.Hour); !ok {
		t.Error("carol's recipient lost across the restart")
	}
	r2.Close()
	pairs, _ = storedRecipientPairs(db)
	if want := []string{"daily|carol"}; !slices.Equal(pairs, want) {
		t.Errorf("after restore and flush: %v, want %v", pairs, want)
	}
}

// A restored filter knows what it knew.
func TestRecipientsRestoreFilter(t *testing.T) {
	db, closeDB := openDB(t, filepath.Join(t.TempDir(), "r.db"))
	ctx := context.Background()
	r, _ := OpenRecipients(db, rt0, RecipientOptions{})
	for i := range 500 {
		r.Add(ctx, "uniq", "alice", ratelimit.HashAddr(fmt.Sprint(i)), rt0, time.Hour, 1000)
	}
	r.Close()
	r2, err := OpenRecipients(db, rt0.Add(30*time.Minute), RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if ok, _ := r2.Seen(ctx, "uniq", "alice", ratelimit.HashAddr(fmt.Sprint(i)), rt0.Add(30*time.Minute), time.Hour); !ok {
			t.Fatalf("address %d forgotten", i)
		}
	}
	if r2.Bytes() != ratelimit.AddrFilterBits(1000)/8 {
		t.Errorf("bytes %d, want one filter of %d", r2.Bytes(), ratelimit.AddrFilterBits(1000)/8)
	}
	closeDB()
}

// An unreadable set refuses the restore, listed with its stored length.
func TestRecipientsRestoreLost(t *testing.T) {
	db, closeDB := openDB(t, filepath.Join(t.TempDir(), "r.db"))
	defer closeDB()
	r, _ := OpenRecipients(db, rt0, RecipientOptions{})
	r.Add(context.Background(), "uniq", "alice", ratelimit.HashAddr("bob"), rt0, time.Hour, 10)
	r.Close()
	var size int
	if err := db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(rcptBucket)
		k := []byte(pairID("uniq", "alice"))
		v := bytes.Clone(b.Get(k))
		v[len(v)-1] ^= 1 // the checksum
		size = len(v)
		return b.Put(k, v)
	}); err != nil {
		t.Fatal(err)
	}
	_, err := OpenRecipients(db, rt0, RecipientOptions{})
	if want := fmt.Sprintf("%d bytes, 1 key", size); !errors.Is(err, statedb.ErrRecordsLost) || !strings.Contains(fmt.Sprint(err), want) {
		t.Errorf("OpenRecipients = %v, want ErrRecordsLost listing %q", err, want)
	}
}

// MaxKeys bounds the pairs; Forget and Sweep drop them.
func TestRecipientsBounds(t *testing.T) {
	ctx := context.Background()
	r := NewRecipients(RecipientOptions{MaxKeys: 320})
	for i := range 5000 {
		r.Add(ctx, "uniq", fmt.Sprintf("user%d", i), 1, rt0, time.Hour, 10)
	}
	if n := r.Len(); n > 320 || n < 200 {
		t.Errorf("%d pairs held, want at most 320 (and most of them)", n)
	}
	if err := r.Add(ctx, "uniq", string(make([]byte, MaxKeyLen+1)), 1, rt0, time.Hour, 10); err != ErrKeyTooLong {
		t.Errorf("long key: %v", err)
	}
	r.Add(ctx, "uniq", "alice", 1, rt0, time.Hour, 10)
	if ok, _ := r.Forget(ctx, "uniq", "alice"); !ok {
		t.Error("Forget found nothing")
	}
	if ok, _ := r.Seen(ctx, "uniq", "alice", 1, rt0, time.Hour); ok {
		t.Error("forgotten recipient still seen")
	}
	if n := r.Sweep(rt0.Add(2 * time.Hour)); n == 0 || r.Len() != 0 {
		t.Errorf("sweep dropped %d, %d left", n, r.Len())
	}
}

func TestRecipientsConcurrent(t *testing.T) {
	db, _ := openDB(t, filepath.Join(t.TempDir(), "r.db"))
	r, _ := OpenRecipients(db, rt0, RecipientOptions{})
	ctx := context.Background()
	stop := flushEvery(time.Millisecond, nil, r.Tick)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				key := fmt.Sprintf("u%d", i%50)
				h := ratelimit.HashAddr(fmt.Sprintf("%d-%d", g, i))
				r.Add(ctx, "uniq", key, h, rt0, time.Hour, 100)
				if ok, _ := r.Seen(ctx, "uniq", key, h, rt0, time.Hour); !ok {
					t.Error("added and not seen")
					return
				}
			}
		}()
	}
	wg.Wait()
	stop()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	pairs, _ := storedRecipientPairs(db)
	if len(pairs) != 50 {
		t.Errorf("%d pairs stored, want 50", len(pairs))
	}
}

// A failed flush (here: a read-only database) is reported to the
// Flusher's onError and its changes are kept for the next flush.
func TestRecipientsFlushFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	_, closeDB := openDB(t, path)
	closeDB()
	ro, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	failed := make(chan error, 16)
	r, err := OpenRecipients(ro, rt0, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stop := flushEvery(time.Millisecond, func(_ string, err error) {
		select {
		case failed <- err:
		default:
		}
	}, r.Tick)
	r.Add(ctx, "uniq", "alice", 1, rt0, time.Hour, 10)
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("nil error reported")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no flush failure reported")
	}
	stop()
	if err := r.Flush(); err == nil {
		t.Error("the failed change was dropped: the next flush had nothing to write")
	}
}

// OpenRecipients on a file whose data pages are zeroed returns ErrDamaged
// instead of panicking (as NewPersistent does).
func TestRecipientsZeroedPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.db")
	db, closeDB := openDB(t, path)
	r, err := OpenRecipients(db, rt0, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		r.Add(context.Background(), "uniq", fmt.Sprintf("user%05d", i), ratelimit.HashAddr("x@example.org"), rt0, time.Hour, 400)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	closeDB()
	zeroDataPages(t, path)
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err) // the meta pages are intact
	}
	defer db.Close()
	if _, err := OpenRecipients(db, rt0, RecipientOptions{}); !errors.Is(err, ErrDamaged) {
		t.Fatalf("OpenRecipients on zeroed pages: %v", err)
	}
}

// storedRecipientPairs lists db's "rcptsets" pairs as "limit|key", sorted.
func storedRecipientPairs(db *bbolt.DB) ([]string, error) {
	var out []string
	err := db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(rcptBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, strings.Replace(string(k), "\x00", "|", 1))
			return nil
		})
	})
	return out, err
}
