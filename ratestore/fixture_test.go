package ratestore

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// The state file fixture of an earlier release (../testdata/statefile):
// what it holds, and the program that wrote it.

// fixtureV2 is a state file written by the release before checksummed
// records (ratestate format 2; commit 5e94383), by
// TestWriteStateFixture: limits hourly (exponential, 200 per 1h) and daily
// (GCRA, 1000 per 24h), 300 keys each, half compacted into the snapshot
// and half in the journal, with overwrites and deletions in the journal;
// 40 recipient sets of limit uniq; five quarantine entries (two held,
// two frozen, one thawed) and one suspension.
const fixtureV2 = "../testdata/statefile/v2.db"

// fixtureNow is the time the fixture was written at: every state is
// recent then.
var fixtureNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

var fixtureLimits = map[string]ratelimit.Limit{
	"hourly": {Limit: 200, Period: time.Hour},
	"daily":  {Algorithm: ratelimit.GCRA, Limit: 1000, Period: 24 * time.Hour},
}

// fixtureState is the rate state of key i of a limit in the fixture.
func fixtureState(limit string, i int) ratelimit.State {
	t := fixtureNow.Add(-time.Duration(i) * time.Second).UnixNano()
	if limit == "daily" {
		return ratelimit.State{Time: fixtureNow.Add(time.Duration(i) * time.Minute).UnixNano()}
	}
	return ratelimit.State{Time: t, Rate: float64(1 + i%250)}
}

// TestWriteStateFixture writes the fixture to the file named by
// $RATELIMITD_WRITE_STATE_FIXTURE (it does nothing otherwise). It wrote
// ../testdata/statefile/v2.db with the code of its release; run now, it
// writes the current format.
func TestWriteStateFixture(t *testing.T) {
	path := os.Getenv("RATELIMITD_WRITE_STATE_FIXTURE")
	if path == "" {
		t.Skip("set RATELIMITD_WRITE_STATE_FIXTURE to a new file's path")
	}
	ctx := context.Background()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := func() time.Time { return fixtureNow }
	p, err := NewPersistent(db, NewMemory(MemoryOptions{}), PersistOptions{Limits: fixtureLimits, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	put := func(limit string, from, to int) {
		for i := from; i < to; i++ {
			if err := p.Update(ctx, limit, fmt.Sprintf("%s-user%04d@example.org", limit, i), set(fixtureState(limit, i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	for limit := range fixtureLimits {
		put(limit, 0, 150)
	}
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	for limit := range fixtureLimits {
		put(limit, 150, 300)
		put(limit, 100, 120) // overwrites of snapshot keys, in the journal
		for i := 10; i < 15; i++ {
			if _, err := p.Delete(ctx, limit, fmt.Sprintf("%s-user%04d@example.org", limit, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRecipients(db, fixtureNow, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		for j := range 1 + i*3 { // from an exact set to a filter
			r.Add(ctx, "uniq", fmt.Sprintf("sender%02d", i), ratelimit.HashAddr(fmt.Sprintf("r%d@example.org", j)), fixtureNow, time.Hour, 400)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	q, err := quarantine.New(db, quarantine.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		e := &quarantine.Entry{Limit: "hourly", Key: fmt.Sprintf("hourly-user%04d@example.org", i), Rate: 250, Max: 200,
			Sender: fmt.Sprintf("hourly-user%04d@example.org", i), Recipients: []string{"rcpt@example.net"},
			ClientAddress: "192.0.2.1", Instance: fmt.Sprintf("inst%d", i), Created: fixtureNow.Add(time.Duration(i) * time.Second)}
		var id string
		if i%2 == 0 {
			e.QueueID = fmt.Sprintf("3A1F%d2B7C9D", i)
			id, err = q.Hold(e)
		} else {
			id, err = q.Freeze(e, fmt.Appendf(nil, "From: %s\r\nSubject: message %d\r\n\r\nbody %d\r\n", e.Sender, i, i))
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			if err := q.MarkThawed(id); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Suspend("hourly-user0001@example.org", "postmaster"); err != nil {
		t.Fatal(err)
	}
}

// fixtureWant is the rate state the fixture holds.
func fixtureWant() map[pair]ratelimit.State {
	want := map[pair]ratelimit.State{}
	for limit := range fixtureLimits {
		for i := range 300 {
			if i < 10 || i >= 15 {
				want[pair{limit, fmt.Sprintf("%s-user%04d@example.org", limit, i)}] = fixtureState(limit, i)
			}
		}
	}
	return want
}

// copyFixture copies the fixture to a new file and opens it.
func copyFixture(t *testing.T) (*bbolt.DB, func()) {
	t.Helper()
	b, err := os.ReadFile(fixtureV2)
	if err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/ratelimitd.db"
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return openDB(t, path)
}

// A state file written by the release before checksummed records opens
// with every state equal, read-only and read-write, and is converted
// when it can be written: every record sealed, format 3, the same states
// after a restart; its recipient sets are sealed by their first flush.
func TestStateFixtureOpensAndConverts(t *testing.T) {
	db, closeDB := copyFixture(t)
	now := func() time.Time { return fixtureNow }
	want := fixtureWant()
	equalStates(t, "stored in the fixture", stored(t, db), want)
	// Negligible at fixtureNow (a GCRA arrival time of now): not restored.
	delete(want, pair{"daily", "daily-user0000@example.org"})
	path := db.Path()
	ro := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: fixtureLimits, Now: now, ReadOnly: true})
	equalStates(t, "restored read-only", contents(t, ro), want)
	ro.Close()
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: fixtureLimits, Now: now})
	equalStates(t, "restored and converted", contents(t, p), want)
	p.Close()
	// Converted: format 3, an empty journal, every value sealed.
	err := db.View(func(tx *bbolt.Tx) error {
		if !rateSealed(tx) {
			t.Errorf("format %q after the conversion", tx.Bucket(bucketName).Get(versionKey))
		}
		if n := tx.Bucket(journalName).Stats().KeyN; n != 0 {
			t.Errorf("%d journal records after the conversion", n)
		}
		return tx.Bucket(bucketName).ForEachBucket(func(name []byte) error {
			return tx.Bucket(bucketName).Bucket(name).ForEach(func(k, v []byte) error {
				if _, err := openCell(k, v, true); err != nil {
					t.Errorf("%s/%s: %v", name, k, err)
				}
				return nil
			})
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	equalStates(t, "stored after the conversion", stored(t, db), want)
	r, err := OpenRecipients(db, fixtureNow, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.Len(); n != 40 {
		t.Errorf("%d recipient sets restored, want 40", n)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	lost, usage, err := statedb.Scan(db, Formats())
	if err != nil || len(lost) > 0 {
		t.Fatalf("scan after the conversion: %v %v", lost, err)
	}
	for _, u := range usage {
		if u.Bucket == string(rcptBucket) && u.Records != 41 {
			t.Errorf("%s: %d records, want 40 and the version", u.Bucket, u.Records)
		}
	}
	closeDB()

	db, _ = openDB(t, path)
	p = newPersistent(t, db, MemoryOptions{}, PersistOptions{Limits: fixtureLimits, Now: now})
	equalStates(t, "restored after the conversion", contents(t, p), want)
	p.Close()
	r, err = OpenRecipients(db, fixtureNow, RecipientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range 40 {
		for j := range 1 + i*3 {
			if ok, _ := r.Seen(context.Background(), "uniq", fmt.Sprintf("sender%02d", i), ratelimit.HashAddr(fmt.Sprintf("r%d@example.org", j)), fixtureNow, time.Hour); !ok {
				t.Fatalf("sender%02d's recipient %d forgotten by the conversion", i, j)
			}
		}
	}
}
