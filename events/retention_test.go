package events

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// MaxRecord bounds one stored event with key and BoltDB's header.
const MaxRecord = keyLen + 16 + 1 + 8*(2+MaxField) + 28 + 4

// TestFloodKeepsOperatorActions: with MaxCount 500, one reset and then
// 1,000 refusals of distinct keys (nothing to coalesce) prune 500
// refusals and no action; the reset is still listed.
func TestFloodKeepsOperatorActions(t *testing.T) {
	l, _, _ := newLog(t, Options{MaxCount: 500})
	l.Record(Event{Time: t0, Key: "alice", Limit: "hourly", Action: Reset, By: "root (uid 0)"})
	l.Tick()
	for i := range 1000 {
		l.Record(refusal(fmt.Sprint("k", i), t0.Add(time.Duration(i+1)*time.Millisecond), 300))
		if i%100 == 99 {
			l.Tick()
		}
	}
	got, err := l.Query(context.Background(), Query{Actions: []string{Reset}})
	if err != nil || len(got) != 1 || got[0].Key != "alice" || got[0].By != "root (uid 0)" {
		t.Fatalf("resets after the flood: %v, %v", keysOf(got), err)
	}
	all, _ := l.Query(context.Background(), Query{Max: 2000})
	if len(all) != 501 || all[0].Key != "k999" || all[499].Key != "k500" || all[500].Action != Reset {
		t.Errorf("after the flood: %d events, newest %s, 500th %s, last %s", len(all), all[0].Key, all[499].Key, all[500].Action)
	}
	if s := l.Stats(); s.Pruned != 500 || s.ActionsPruned != 0 || s.Stored != 500 || s.ActionsStored != 1 {
		t.Errorf("stats %+v, want 500 refusals pruned and stored, 1 action stored", s)
	}
}

// TestActionsHaveTheirOwnBounds: ActionMaxCount prunes actions, oldest
// first, and leaves the refusals.
func TestActionsHaveTheirOwnBounds(t *testing.T) {
	l, c, _ := newLog(t, Options{ActionMaxCount: 3, ActionMaxAge: time.Hour})
	l.Record(refusal("alice", t0, 300))
	for i := range 5 {
		l.Record(Event{Time: t0.Add(time.Duration(i) * time.Second), Action: Reload, Detail: fmt.Sprint("r", i)})
	}
	l.Tick()
	got, _ := l.Query(context.Background(), Query{Actions: []string{Reload}})
	if len(got) != 3 || got[0].Detail != "r4" || got[2].Detail != "r2" {
		t.Errorf("reloads kept: %v", got)
	}
	c.Add(2 * time.Hour)
	l.Tick()
	if s := l.Stats(); s.ActionsPruned != 5 || s.ActionsStored != 0 || s.Stored != 1 || s.Pruned != 0 {
		t.Errorf("after ActionMaxAge: %+v", s)
	}
}

// TestRefusalsOfOneKeyCoalesce: N refusals of one key, limit and action in
// one interval are one record with count N, first and last time and the
// highest rate, also when flushes fall between them (Sender, Client and
// QueueID are the first's); the next interval
// and another action start new records. Repeated, with Record racing
// Tick.
func TestRefusalsOfOneKeyCoalesce(t *testing.T) {
	for round := range 5 {
		l, _, _ := newLog(t, Options{Coalesce: time.Minute})
		const n, writers = 1001, 4
		l.Record(refusal("alice", t0.Add(time.Millisecond), 200))
		ctx, cancel := context.WithCancel(context.Background())
		f := statedb.NewFlusher(time.Millisecond, nil, nil)
		f.Add("events", l.Tick)
		flushed := make(chan struct{})
		go func() { f.Run(ctx); close(flushed) }()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range n / writers {
					at := t0.Add(time.Duration(2+w*(n/writers)+i) * time.Millisecond)
					l.Record(refusal("alice", at, float64(200+i)))
				}
			}()
		}
		wg.Wait()
		cancel()
		<-flushed
		l.Record(refusal("alice", t0.Add(time.Minute), 500)) // the next interval
		e := refusal("alice", t0.Add(2*time.Second), 500)
		e.Action = Reject
		l.Record(e)
		got, err := l.Query(context.Background(), Query{Key: "alice"})
		if err != nil || len(got) != 3 {
			t.Fatalf("round %d: %v, %v", round, keysOf(got), err)
		}
		first := got[2]
		if first.Count != n || first.Action != Defer || !first.Time.Equal(t0.Add(time.Millisecond)) ||
			!first.Last.Equal(t0.Add(n*time.Millisecond)) || first.Rate != 200+n/writers-1 {
			t.Errorf("round %d: coalesced record %+v, want count %d from 12:00:00.001 to 12:00:01.001", round, first, n)
		}
		if got[0].Count != 1 || got[1].Count != 1 || !got[0].Last.Equal(got[0].Time) {
			t.Errorf("round %d: next interval %+v, other action %+v: want count 1 each", round, got[0], got[1])
		}
		if s := l.Stats(); s.Coalesced != n-1 || s.Stored != 3 || s.Written != 3 {
			t.Errorf("round %d: stats %+v", round, s)
		}
		sum, _ := l.Summary(context.Background(), Query{})
		if len(sum) != 1 || sum[0].Refusals != n+2 || sum[0].Actions[Defer] != n+1 || !sum[0].Last.Equal(t0.Add(time.Minute)) {
			t.Errorf("round %d: summary %+v", round, sum)
		}
	}
}

// TestCoalescedCountSurvivesRestart: a count grown after its record was
// written reaches the file by Close and reads back after a restart.
func TestCoalescedCountSurvivesRestart(t *testing.T) {
	l, _, path := newLog(t, Options{})
	l.Record(refusal("alice", t0, 300))
	l.Tick()
	for i := range 9 {
		l.Record(refusal("alice", t0.Add(time.Duration(i+1)*time.Second), 300))
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.db.Close()
	l2, err := Open(openDB(t, path, true), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := l2.Query(context.Background(), Query{})
	if err != nil || len(got) != 1 || got[0].Count != 10 || !got[0].Last.Equal(t0.Add(9*time.Second)) {
		t.Fatalf("after restart: %+v, %v", got, err)
	}
}

// hostile is a 30 KB string of the kind a hostile sender sends.
func hostile(i int) string {
	return fmt.Sprintf("%05d", i) + strings.Repeat("a\u202eé", 30_000/5) + "@example.org"
}

// TestHostileEventsBounded: events whose every field is 30 KB take at most
// MaxRecord bytes each; 1,000 refusals of one key with 30 KB senders are
// one record; 1,000 of distinct 30 KB keys, and 1,000 events of eight 30
// KB fields, stay within MaxRecord bytes of leaves each, and the state
// file's pages in use (BoltDB's high-water mark) grow by about that.
func TestHostileEventsBounded(t *testing.T) {
	h := hostile(0)
	e := Event{Time: t0, Key: h, Limit: h, Action: Defer, Sender: h, Client: h, QueueID: h, By: h, Detail: h, Rate: 1, Max: 1}
	if n := len(encode(nil, &e)); n > MaxRecord {
		t.Errorf("a record of 30 KB fields: %d bytes, more than MaxRecord %d", n, MaxRecord)
	}

	l, _, _ := newLog(t, Options{})
	l.Tick()
	before := dbSize(l.db)
	for i := range 1000 {
		e := refusal("192.0.2.1", t0.Add(time.Duration(i)*time.Millisecond), 300)
		e.Sender = hostile(i)
		l.Record(e)
	}
	l.Tick()
	got, _ := l.Query(context.Background(), Query{})
	if len(got) != 1 || got[0].Count != 1000 || len(got[0].Sender) > MaxField {
		t.Fatalf("1,000 refusals of one client: %d records, count %d", len(got), got[0].Count)
	}
	t.Logf("1,000 refusals of one client with 30 KB senders: pages in use grew %d bytes", dbSize(l.db)-before)

	before = dbSize(l.db)
	for i := range 1000 {
		e := refusal(hostile(i), t0.Add(time.Duration(i)*time.Millisecond), 300)
		e.Sender = hostile(i)
		l.Record(e)
	}
	l.Tick()
	grown := dbSize(l.db) - before
	var leaf int
	l.db.View(func(tx *bolt.Tx) error { leaf = tx.Bucket(bucketLog).Stats().LeafInuse; return nil })
	t.Logf("1,000 refusals of distinct 30 KB keys and senders: pages in use grew %d bytes (%d a refusal), %d bytes of leaves in use for 1,001 records",
		grown, grown/1000, leaf)
	if grown/1000 > MaxRecord || leaf/1001 > MaxRecord {
		t.Errorf("%d bytes on disk a refusal, %d in leaves a record: more than MaxRecord %d", grown/1000, leaf/1001, MaxRecord)
	}

	before, leafBefore := dbSize(l.db), leaf
	for i := range 1000 {
		h := hostile(i)
		l.Record(Event{Time: t0.Add(time.Duration(i) * time.Millisecond), Key: h, Limit: h, Action: Defer,
			Sender: h, Client: h, QueueID: h, By: h, Detail: h})
	}
	l.Tick()
	grown = dbSize(l.db) - before
	l.db.View(func(tx *bolt.Tx) error { leaf = tx.Bucket(bucketLog).Stats().LeafInuse; return nil })
	t.Logf("1,000 events of eight distinct 30 KB fields: pages in use grew %d bytes (%d an event), %d bytes of leaves an event",
		grown, grown/1000, (leaf-leafBefore)/1000)
	// A page holds one such record, or two: the pages are at most twice it.
	if (leaf-leafBefore)/1000 > MaxRecord || grown/1000 > 2*MaxRecord {
		t.Errorf("an event of 30 KB fields: %d bytes in leaves, %d of pages: more than MaxRecord %d (twice it)",
			(leaf-leafBefore)/1000, grown/1000, MaxRecord)
	}
}

// TestFailedFlushKeepsCoalescedCounts: a flush that fails (the log's
// bucket gone) requeues the coalesced record with its count; the next
// flush writes it, and later refusals grow the written record.
func TestFailedFlushKeepsCoalescedCounts(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	buckets := func(f func(*bolt.Tx, []byte) error) {
		t.Helper()
		if err := l.db.Update(func(tx *bolt.Tx) error { return f(tx, bucketLog) }); err != nil {
			t.Fatal(err)
		}
	}
	buckets(func(tx *bolt.Tx, b []byte) error { return tx.DeleteBucket(b) })
	for i := range 3 {
		l.Record(refusal("alice", t0.Add(time.Duration(i)*time.Second), 300))
	}
	l.Record(Event{Time: t0, Action: Reload})
	if err := l.Tick(); err == nil {
		t.Fatal("a flush without the log's bucket succeeded")
	}
	l.Record(refusal("alice", t0.Add(3*time.Second), 300))
	buckets(func(tx *bolt.Tx, b []byte) error { _, err := tx.CreateBucket(b); return err })
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	l.Record(refusal("alice", t0.Add(4*time.Second), 300))
	got, err := l.Query(context.Background(), Query{})
	if err != nil || len(got) != 2 || got[1].Count != 5 || !got[1].Last.Equal(t0.Add(4*time.Second)) || got[0].Action != Reload {
		t.Fatalf("after a failed flush: %+v, %v", got, err)
	}
	if s := l.Stats(); s.Failures != 1 || s.Coalesced != 4 || s.Dropped != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestOpenRecordsBounded: with QueueSize records open in one interval a
// new key's refusals are records of their own, not coalesced and not
// tracked; in the next interval the old ones close and coalescing resumes.
func TestOpenRecordsBounded(t *testing.T) {
	l, c, _ := newLog(t, Options{QueueSize: 10})
	for i := range 10 {
		l.Record(refusal(fmt.Sprint("k", i), t0, 300))
	}
	l.Tick()
	l.Record(refusal("late", t0, 300))
	l.Record(refusal("late", t0, 300))
	if s := l.Stats(); s.Coalesced != 0 || s.Recorded != 12 || len(l.open) != 10 {
		t.Errorf("beyond the bound: %+v, %d open", s, len(l.open))
	}
	c.Add(time.Minute)
	l.Tick()
	l.Record(refusal("late", c.Now(), 300))
	l.Record(refusal("late", c.Now(), 300))
	if s := l.Stats(); s.Coalesced != 1 || len(l.open) != 1 {
		t.Errorf("next interval: %+v, %d open", s, len(l.open))
	}
}
