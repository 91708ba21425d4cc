package events

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/statedb"
	bolt "go.etcd.io/bbolt"
)

// BenchmarkRecord: the cost Record adds to a refusal on the decide path,
// with a Flusher flushing behind: "coalesced", one key refused again and
// again; "new", every refusal a record of its own (Coalesce 1 ns).
func BenchmarkRecord(b *testing.B) {
	for _, bc := range []struct {
		name     string
		coalesce time.Duration
	}{{"coalesced", time.Minute}, {"new", time.Nanosecond}} {
		b.Run(bc.name, func(b *testing.B) {
			l, _, _ := newLog(b, Options{Now: time.Now, QueueSize: 1 << 20, Coalesce: bc.coalesce})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			f := statedb.NewFlusher(10*time.Millisecond, nil, nil)
			f.Add("events", l.Tick)
			go f.Run(ctx)
			e := Event{Key: "alice@example.org", Limit: "hourly", Action: Defer, Rate: 201, Max: 200,
				Sender: "alice@example.org", Client: "192.0.2.1", QueueID: "4Q1x2y3zAb"}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l.Record(e)
				}
			})
			b.StopTimer()
			l.Close()
			if s := l.Stats(); s.Dropped > 0 {
				b.Logf("dropped %d of %d", s.Dropped, s.Recorded+s.Coalesced+s.Dropped)
			}
		})
	}
}

// BenchmarkStateFileGrowth writes 1,000,000 refusals of 10,000 senders
// (key, limit, sender, IPv4 client, queue ID) in flushes of 10,000, and
// reports the growth of the state file (BoltDB's size, the high-water
// mark of its pages) per event and per 1,000,000 events. Run it with
// -benchtime=1x: every iteration writes the same million.
func BenchmarkStateFileGrowth(b *testing.B) {
	const n, flush = 1_000_000, 10_000
	for b.Loop() {
		path := filepath.Join(b.TempDir(), "state.db")
		db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now().Add(-24 * time.Hour)
		l, err := Open(db, Options{QueueSize: flush, Now: time.Now})
		if err != nil {
			b.Fatal(err)
		}
		before := dbSize(db)
		for i := range n {
			user := fmt.Sprintf("user%05d@example.org", i%10000)
			l.Record(Event{Time: start.Add(time.Duration(i) * 50 * time.Millisecond), Key: user, Limit: "hourly",
				Action: Defer, Rate: 200 + float64(i%50), Max: 200, Sender: user,
				Client: fmt.Sprintf("198.51.100.%d", i%250), QueueID: fmt.Sprintf("4Q%08X", i)})
			if (i+1)%flush == 0 {
				if err := l.Tick(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
		grown := dbSize(db) - before
		db.Close()
		fi, _ := os.Stat(path)
		b.ReportMetric(float64(grown)/n, "bytes/event")
		b.ReportMetric(float64(grown)/(1<<20), "MiB/1M-events")
		b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
	}
}

// dbSize is the size of db's pages in use up to the high-water mark.
func dbSize(db *bolt.DB) (n int64) {
	db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n
}
