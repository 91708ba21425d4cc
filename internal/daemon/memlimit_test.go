package daemon

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestKnownHeapCoversFlushBuffers checks that what the daemon counts as
// held on the heap for its soft memory limit (knownHeap) covers the arrays
// the state file's flushes keep from one to the next. Before they counted,
// a daemon holding 1,000,000 users had a limit a few MiB above its live
// heap instead of memoryHeadroom, and collected garbage many times a
// second under load (GODEBUG=gctrace=1; docs/performance.md).
func TestKnownHeapCoversFlushBuffers(t *testing.T) {
	db, err := bolt.Open(filepath.Join(t.TempDir(), "ratelimitd.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	mem := ratestore.NewMemory(ratestore.MemoryOptions{})
	state, err := ratestore.NewPersistent(db, mem, ratestore.PersistOptions{Limits: storeLimits(f.PolicyConfig()), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	engine, err := policy.NewEngine(f.PolicyConfig(), state)
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{mem: mem, state: state, engine: engine}

	live := func() int64 {
		runtime.GC()
		s := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
		rtmetrics.Read(s)
		return int64(s[0].Value.Uint64())
	}
	base := live() // the test binary's own heap
	ctx := context.Background()
	const users = 150_000
	now := time.Now().UnixNano()
	for i := range users {
		key := fmt.Sprintf("user%07d@example.org", i)
		for _, lim := range []string{"hourly", "daily"} {
			if err := state.Update(ctx, lim, key, func(ratelimit.State) (ratelimit.State, bool) {
				return ratelimit.State{Time: now, Rate: 1}, true
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := state.Flush(); err != nil {
		t.Fatal(err)
	}
	held := live() - base
	known, working := d.knownHeap()
	t.Logf("live heap %.1f MiB above the test's own, known %.1f MiB, of which flush buffers %.1f MiB",
		float64(held)/(1<<20), float64(known)/(1<<20), float64(working)/(1<<20))
	if working == 0 {
		t.Error("knownHeap counts no flush buffers after a flush of 300,000 changes")
	}
	// Without the buffers counted, the live heap is above the known
	// figure by about the buffers' size; other tests' leftovers may add
	// a little.
	if missed := held - known; missed > working/2 {
		t.Errorf("the live heap is %.1f MiB above what knownHeap counts, want at most half the flush buffers' %.1f MiB",
			float64(missed)/(1<<20), float64(working)/(1<<20))
	}
	limit, _ := d.memoryLimit()
	if limit < held+memoryHeadroom {
		t.Errorf("memory limit %d, want at least the live heap %d plus %d", limit, held, memoryHeadroom)
	}
}

// TestShouldRelease checks when the daemon gives freed memory back to the
// system at once: a compaction's index freed, the flush buffers dropped
// when the load stopped; not when buffers shrink a little or were small.
func TestShouldRelease(t *testing.T) {
	for _, c := range []struct {
		last, working int64
		want          bool
	}{
		{0, 0, false},
		{60 << 20, 10 << 20, true},  // a compaction ended
		{10 << 20, 0, true},         // quiet: a flush had nothing to write
		{512 << 10, 0, false},       // quiet, but the buffers were small
		{20 << 20, 12 << 20, false}, // the load fell a little
		{10 << 20, 30 << 20, false}, // grew
	} {
		if got := shouldRelease(c.last, c.working); got != c.want {
			t.Errorf("shouldRelease(%d, %d) = %v, want %v", c.last, c.working, got, c.want)
		}
	}
}

// TestReleaser checks that a release due within releaseEvery of the last
// one is made once that has passed, not dropped: when the load stops, the
// flush buffers go first and a compaction may end a second later; the
// second release gives back the compaction's memory.
func TestReleaser(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	r := releaser{last: 40 << 20, released: start.Add(-time.Minute)}
	steps := []struct {
		at      time.Duration
		working int64
		want    bool
	}{
		{0, 40 << 20, false},
		{time.Second, 24 << 20, true},       // the flush buffers went: 16 MiB
		{2 * time.Second, 0, false},         // the compaction ended, too soon
		{3 * time.Second, 0, true},          // the waiting release
		{4 * time.Second, 0, false},         // nothing more
		{5 * time.Second, 512 << 10, false}, // a little load
		{6 * time.Second, 0, false},         // small buffers dropped
		{7 * time.Second, 8 << 20, false},
		{8 * time.Second, 0, true}, // quiet again after a burst
	}
	for _, st := range steps {
		if got := r.tick(start.Add(st.at), st.working); got != st.want {
			t.Errorf("at %v with %d bytes of buffers: release %v, want %v", st.at, st.working, got, st.want)
		}
	}
}
