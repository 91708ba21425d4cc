package events

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/statedb"
	bolt "go.etcd.io/bbolt"
)

// openDB opens a BoltDB file in dir, checked for consistency when the test
// ends.
func openDB(t testing.TB, path string, readOnly bool) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: readOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				t.Errorf("bolt check: %v", err)
			}
			return nil
		})
		db.Close()
	})
	return db
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func newLog(t testing.TB, opts Options) (*Log, *clock, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	c := &clock{t: t0}
	if opts.Now == nil {
		opts.Now = c.Now
	}
	l, err := Open(openDB(t, path, false), opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, c, path
}

func refusal(key string, at time.Time, rate float64) Event {
	return Event{Time: at, Key: key, Limit: "hourly", Action: Defer, Rate: rate, Max: 200,
		Sender: key + "@example.org", Client: "192.0.2.1", QueueID: "4Q1x2y3z"}
}

func keysOf(es []Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, fmt.Sprintf("%s %s %s", e.Time.UTC().Format("15:04:05"), e.Key, e.Action))
	}
	return out
}

func TestQueryNewestFirstWithFilters(t *testing.T) {
	l, _, _ := newLog(t, Options{Coalesce: time.Second})
	l.Record(refusal("alice", t0.Add(1*time.Second), 201))
	l.Record(Event{Time: t0.Add(2 * time.Second), Key: "bob", Limit: "daily", Action: Warn, Rate: 900, Max: 1000})
	l.Record(refusal("alice", t0.Add(3*time.Second), 202))
	l.Record(Event{Time: t0.Add(4 * time.Second), Action: Reload, By: "root", Detail: "/etc/ratelimitd/ratelimitd.toml"})
	l.Record(Event{Time: t0.Add(5 * time.Second), Key: "alice", Limit: "hourly", Action: Reset, By: "root (uid 0)"})
	ctx := context.Background()

	all, err := l.Query(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"12:00:05 alice reset", "12:00:04  reload", "12:00:03 alice defer", "12:00:02 bob warn", "12:00:01 alice defer"}
	if got := keysOf(all); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Query{} = %q, want %q", got, want)
	}
	if e := all[2]; e.Limit != "hourly" || e.Rate != 202 || e.Max != 200 || e.Sender != "alice@example.org" ||
		e.Client != "192.0.2.1" || e.QueueID != "4Q1x2y3z" || !e.Time.Equal(t0.Add(3*time.Second)) || len(e.ID) != 34 {
		t.Errorf("stored event = %+v", e)
	}
	for _, tc := range []struct {
		q    Query
		want []string
	}{
		{Query{Key: "alice"}, []string{"12:00:05 alice reset", "12:00:03 alice defer", "12:00:01 alice defer"}},
		{Query{Key: "alice", Actions: []string{Defer}}, []string{"12:00:03 alice defer", "12:00:01 alice defer"}},
		{Query{Limit: "daily"}, []string{"12:00:02 bob warn"}},
		{Query{Actions: []string{Warn, Reload}}, []string{"12:00:04  reload", "12:00:02 bob warn"}},
		{Query{Since: t0.Add(2 * time.Second), Until: t0.Add(4 * time.Second)}, []string{"12:00:04  reload", "12:00:03 alice defer", "12:00:02 bob warn"}},
		{Query{Max: 2}, []string{"12:00:05 alice reset", "12:00:04  reload"}},
		{Query{Key: "carol"}, nil},
	} {
		got, err := l.Query(ctx, tc.q)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(keysOf(got)) != fmt.Sprint(tc.want) {
			t.Errorf("Query(%+v) = %q, want %q", tc.q, keysOf(got), tc.want)
		}
	}
}

// TestPagingWithBefore: pages of Max events chained by the last ID cover
// every event once, even events recorded at the same nanosecond.
func TestPagingWithBefore(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	for i := range 25 {
		l.Record(refusal(fmt.Sprint("k", i), t0.Add(time.Duration(i/2)*time.Second), float64(i)))
	}
	seen := map[string]bool{}
	q := Query{Max: 7}
	var pages int
	for {
		page, err := l.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		pages++
		for i, e := range page {
			if seen[e.Key] {
				t.Errorf("%s returned twice", e.Key)
			}
			seen[e.Key] = true
			if i > 0 && e.Time.After(page[i-1].Time) {
				t.Errorf("page not newest first: %v after %v", e.Time, page[i-1].Time)
			}
		}
		q.Before = page[len(page)-1].ID
	}
	if len(seen) != 25 || pages != 4 {
		t.Errorf("%d events in %d pages, want 25 in 4", len(seen), pages)
	}
	if _, err := l.Query(context.Background(), Query{Before: "zz"}); err == nil {
		t.Error("an invalid Before was accepted")
	}
}

func TestBoundByCountDeletesOldest(t *testing.T) {
	l, c, _ := newLog(t, Options{MaxCount: 100})
	for i := range 250 {
		l.Record(refusal(fmt.Sprint(i), c.Now().Add(time.Duration(i)*time.Millisecond), 0))
		if i%60 == 0 {
			if err := l.Tick(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	got, err := l.Query(context.Background(), Query{Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 100 || got[0].Key != "249" || got[99].Key != "150" {
		t.Fatalf("kept %d events, newest %s, oldest %s; want 100, 249 to 150", len(got), got[0].Key, got[len(got)-1].Key)
	}
	if s := l.Stats(); s.Stored != 100 || s.Pruned != 150 || s.Written != 250 {
		t.Errorf("stats %+v, want stored 100, pruned 150, written 250", s)
	}
}

func TestBoundByAgeDeletesOlder(t *testing.T) {
	l, c, _ := newLog(t, Options{MaxAge: 24 * time.Hour})
	for h := range 48 {
		l.Record(refusal(fmt.Sprint("h", h), t0.Add(time.Duration(h)*time.Hour), 0))
	}
	c.Add(47 * time.Hour) // now = the last event; 24 h ago is hour 23
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	got, _ := l.Query(context.Background(), Query{})
	if len(got) != 25 || got[len(got)-1].Key != "h23" {
		t.Fatalf("kept %d, oldest %s; want 25 back to h23", len(got), got[len(got)-1].Key)
	}
	// Time passing alone prunes, at the next flush with nothing queued.
	c.Add(10 * time.Hour)
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.Query(context.Background(), Query{}); len(got) != 15 || l.Stats().Stored != 15 {
		t.Errorf("after 10 h more: %d events (stored %d), want 15", len(got), l.Stats().Stored)
	}
}

// TestPruneInBatches: more records due than one transaction deletes are
// all deleted by one Tick.
func TestPruneInBatches(t *testing.T) {
	l, c, _ := newLog(t, Options{MaxAge: time.Hour, QueueSize: 2 * pruneBatch, Coalesce: time.Nanosecond})
	for i := range pruneBatch + 500 {
		l.Record(Event{Time: t0.Add(time.Duration(i) * time.Microsecond), Key: "k", Action: Defer})
	}
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	c.Add(2 * time.Hour)
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Stored != 0 || s.Pruned != pruneBatch+500 {
		t.Errorf("stats %+v, want all pruned", s)
	}
}

func TestSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := Open(db, Options{Coalesce: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	f := statedb.NewFlusher(time.Second, nil, nil)
	f.Add("events", l.Tick)
	go func() { f.Run(ctx); close(done) }()
	base := time.Now().Add(-time.Hour) // within the default MaxAge
	for i := range 5 {
		l.Record(refusal("alice", base.Add(time.Duration(i)*time.Second), 200+float64(i)))
	}
	// Close writes what is still queued.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	l.Record(refusal("late", t0, 0)) // after Close: dropped
	if s := l.Stats(); s.Dropped != 1 || s.Written != 5 {
		t.Errorf("stats %+v, want 5 written, 1 dropped", s)
	}
	db.Close()

	for _, ro := range []bool{false, true} {
		db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second, ReadOnly: ro})
		if err != nil {
			t.Fatal(err)
		}
		l2, err := Open(db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l2.Query(context.Background(), Query{Key: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 || got[0].Rate != 204 || !got[0].Time.Equal(base.Add(4*time.Second)) || l2.Stats().Stored != 5 {
			t.Fatalf("read-only %v: after restart %d events (%v), stored %d", ro, len(got), keysOf(got), l2.Stats().Stored)
		}
		if ro {
			l2.Record(refusal("x", base, 0))
			if s := l2.Stats(); s.Dropped != 1 {
				t.Errorf("read-only Record: stats %+v, want dropped", s)
			}
		}
		l2.Close()
		db.Close()
	}
}

// TestRecordDoesNotBlockOnTheFile: while the file's write lock is held (a
// slow disk, a long compaction), Record returns at once and a flush waits.
func TestRecordDoesNotBlockOnTheFile(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	release := make(chan struct{})
	locked := make(chan struct{})
	go l.db.Update(func(*bolt.Tx) error { close(locked); <-release; return nil })
	<-locked
	flushed := make(chan error)
	l.Record(refusal("first", t0, 0))
	go func() { flushed <- l.Tick() }()
	start := time.Now()
	for i := range 10000 {
		l.Record(refusal(fmt.Sprint(i), t0, 0))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("10,000 Records took %v with the file locked", d)
	}
	select {
	case err := <-flushed:
		t.Fatalf("flush returned %v while the file was locked", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-flushed; err != nil {
		t.Fatal(err)
	}
	if err := l.Tick(); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Written != 10001 || s.Dropped != 0 {
		t.Errorf("stats %+v, want 10001 written", s)
	}
}

func TestFullQueueDropsAndCounts(t *testing.T) {
	l, _, _ := newLog(t, Options{QueueSize: 10})
	for i := range 15 {
		l.Record(refusal(fmt.Sprint(i), t0, 0))
	}
	if s := l.Stats(); s.Recorded != 10 || s.Dropped != 5 || s.Pending != 10 {
		t.Errorf("stats %+v, want 10 recorded, 5 dropped, 10 pending", s)
	}
	got, _ := l.Query(context.Background(), Query{})
	if len(got) != 10 {
		t.Errorf("%d stored, want 10", len(got))
	}
	// The queue has room again after a flush.
	l.Record(refusal("again", t0, 0))
	if s := l.Stats(); s.Recorded != 11 || s.Pending != 1 {
		t.Errorf("stats %+v after flush", s)
	}
}

func TestSummaryPerKey(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	for i := range 5 {
		l.Record(refusal("alice", t0.Add(time.Duration(i)*time.Minute), 201+float64(i)))
	}
	l.Record(Event{Time: t0.Add(10 * time.Minute), Key: "alice", Limit: "daily", Action: Hold, Rate: 1001, Max: 1000})
	l.Record(Event{Time: t0.Add(11 * time.Minute), Key: "alice", Action: Thaw, By: "root"})
	l.Record(refusal("bob", t0.Add(2*time.Minute), 300))
	l.Record(Event{Time: t0.Add(3 * time.Minute), Key: "carol", Limit: "hourly", Action: Warn})
	got, err := l.Summary(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("Summary = %+v, want alice and bob", got)
	}
	a := got[0]
	if a.Key != "alice" || a.Refusals != 6 || !a.First.Equal(t0) || !a.Last.Equal(t0.Add(10*time.Minute)) ||
		fmt.Sprint(a.Limits) != "[daily hourly]" || a.Actions[Defer] != 5 || a.Actions[Hold] != 1 {
		t.Errorf("alice: %+v", a)
	}
	if b := got[1]; b.Key != "bob" || b.Refusals != 1 {
		t.Errorf("bob: %+v", b)
	}
	w, _ := l.Summary(context.Background(), Query{Actions: []string{Warn}})
	if len(w) != 1 || w[0].Key != "carol" {
		t.Errorf("warnings summary %+v", w)
	}
	if s, _ := l.Summary(context.Background(), Query{Since: t0.Add(4 * time.Minute)}); len(s) != 1 || s[0].Refusals != 2 {
		t.Errorf("summary since 12:04 = %+v, want alice with 2", s)
	}
}

func TestCorruptRecordIsReported(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	l.Record(refusal("alice", t0, 1))
	l.Tick()
	l.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketLog).Put(recordKey(classDecision, t0.Add(time.Second), 99), []byte{formatVersion, 200})
	})
	if _, err := l.Query(context.Background(), Query{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Query = %v, want ErrCorrupt", err)
	}
	if _, err := l.Query(context.Background(), Query{Key: "alice"}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Query(key) = %v, want ErrCorrupt", err)
	}
}

// TestLongFieldsAreClipped: a field beyond MaxField is cut at a character
// boundary and ends in the marker with the bytes cut, within MaxField.
func TestLongFieldsAreClipped(t *testing.T) {
	l, _, _ := newLog(t, Options{})
	long := strings.Repeat("é", 1500)
	l.Record(Event{Time: t0, Key: "k", Action: Reload, Detail: long, By: strings.Repeat("b", MaxField)})
	got, err := l.Query(context.Background(), Query{})
	if err != nil || len(got) != 1 {
		t.Fatalf("got %v, err %v", got, err)
	}
	d := got[0].Detail
	kept := d[:max(strings.Index(d, clipMarker), 0)]
	if len(d) > MaxField || !utf8.ValidString(d) || !strings.HasPrefix(long, kept) ||
		!strings.HasSuffix(d, fmt.Sprintf("…[+%d]", len(long)-len(kept))) {
		t.Errorf("detail of %d bytes: %q", len(d), d)
	}
	if got[0].By != strings.Repeat("b", MaxField) {
		t.Errorf("a field of exactly MaxField bytes was changed: %q", got[0].By)
	}
}

func TestNilLogRecordsNothing(t *testing.T) {
	var l *Log
	l.Record(Event{Action: Defer})
	if got, err := l.Query(context.Background(), Query{}); got != nil || err != nil {
		t.Errorf("nil Log Query = %v, %v", got, err)
	}
	if err := l.Close(); err != nil {
		t.Error(err)
	}
}
