package ratestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// TestManifestFollowsWrites: every write of the store (flushes, new keys,
// changed keys, deletions, compaction, a bucket emptied and deleted)
// keeps each bucket's manifest entry equal to what the bucket holds.
func TestManifestFollowsWrites(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, closeDB := openDB(t, path)
	defer closeDB()
	p := newPersistent(t, db, MemoryOptions{}, PersistOptions{})
	scan := func(when string) {
		t.Helper()
		if lost, _, err := statedb.Scan(db, Formats()); err != nil || len(lost) > 0 {
			t.Fatalf("%s: %v %v", when, lost, err)
		}
	}
	for round := range 3 {
		for i := range 500 {
			p.Update(ctx, "hourly", fmt.Sprintf("user%04d", i+round*100), set(ratelimit.State{Time: int64(round + 1), Rate: 1}))
			p.Update(ctx, "daily", fmt.Sprintf("user%04d", i), set(ratelimit.State{Time: int64(round + 1), Rate: 2}))
		}
		for i := range 50 {
			p.Delete(ctx, "hourly", fmt.Sprintf("user%04d", i*7+round))
		}
		if err := p.Flush(); err != nil {
			t.Fatal(err)
		}
		scan(fmt.Sprintf("round %d flushed", round))
		if err := p.compact(nil); err != nil {
			t.Fatal(err)
		}
		scan(fmt.Sprintf("round %d compacted", round))
	}
	for i := range 500 {
		p.Delete(ctx, "daily", fmt.Sprintf("user%04d", i))
	}
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := p.compact(nil); err != nil {
		t.Fatal(err)
	}
	scan("daily emptied")
	p.Close()
	scan("closed")
}
