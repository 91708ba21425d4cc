package ratestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestMemoryEvaluateStackEvicting drives Memory.EvaluateStack and the
// reference policy.EvaluateStack over two stores so small (one, then two
// states a shard) that storing a stack's new state evicts others, among
// them the entries the same stack found and is about to write: every
// result and the states left must be the same. One rate key, so that it
// falls in one shard of each store whatever their hash seeds.
func TestMemoryEvaluateStackEvicting(t *testing.T) {
	for _, maxKeys := range []int{64, 128} {
		t.Run(fmt.Sprint(maxKeys/64, "-per-shard"), func(t *testing.T) { testEvaluateStackEvicting(t, maxKeys) })
	}
}

func testEvaluateStackEvicting(t *testing.T, maxKeys int) {
	ctx := context.Background()
	opts := ratestore.MemoryOptions{MaxKeys: maxKeys}
	got, want := ratestore.NewMemory(opts), ratestore.NewMemory(opts)
	limits := []policy.StackItem{
		{Limit: "hourly", Params: ratelimit.Limit{Limit: 3, Period: time.Hour}, Refuses: true},
		{Limit: "daily", Params: ratelimit.Limit{Limit: 5, Period: 24 * time.Hour, Mode: ratelimit.Strict}, Refuses: true},
		{Limit: "warn", Params: ratelimit.Limit{Limit: 2, Period: time.Minute}},
	}
	r := rand.New(rand.NewPCG(3, 4))
	now := time.Unix(1_790_000_000, 0)
	inserts := 0
	for step := range 5000 {
		now = now.Add(time.Duration(r.IntN(5000)) * time.Millisecond)
		key := "alice"
		var items []policy.StackItem
		for _, li := range r.Perm(len(limits))[:1+r.IntN(len(limits))] {
			it := limits[li]
			it.Key, it.Cost, it.Count = key, 1, r.IntN(6) != 0
			items = append(items, it)
		}
		refused := r.IntN(10) == 0
		g, w := make([]policy.StackResult, len(items)), make([]policy.StackResult, len(items))
		if err := got.EvaluateStack(ctx, now, items, refused, g); err != nil {
			t.Fatal(err)
		}
		if err := policy.EvaluateStack(ctx, want, now, items, refused, w); err != nil {
			t.Fatal(err)
		}
		for i := range items {
			if g[i].Prev != w[i].Prev || g[i].Result != w[i].Result || g[i].Stored != w[i].Stored || (g[i].Err == nil) != (w[i].Err == nil) {
				t.Fatalf("step %d item %d (%s %s): got %+v, reference %+v", step, i, items[i].Limit, key, g[i], w[i])
			}
			if g[i].Prev == (ratelimit.State{}) && g[i].Stored {
				inserts++
			}
		}
	}
	if inserts < 500 || got.Evicted() < 500 {
		t.Fatalf("%d new states, %d evictions: the test did not exercise eviction", inserts, got.Evicted())
	}
	states := func(m *ratestore.Memory) map[string]ratelimit.State {
		out := map[string]ratelimit.State{}
		m.Range(ctx, func(l, k string, s ratelimit.State) bool { out[l+"/"+k] = s; return true })
		return out
	}
	gs, ws := states(got), states(want)
	if len(gs) != len(ws) {
		t.Fatalf("%d states left, reference %d", len(gs), len(ws))
	}
	for k, s := range ws {
		if gs[k] != s {
			t.Fatalf("%s: %+v, reference %+v", k, gs[k], s)
		}
	}
}

// TestMemoryEvaluateStackAcrossShards runs stacks whose two limits have
// different keys (by user and by client address), in both orders, from
// many goroutines: each stack locks both keys' shards, so the strict limit
// must admit exactly its limit and nothing may deadlock.
func TestMemoryEvaluateStackAcrossShards(t *testing.T) {
	m := ratestore.NewMemory(ratestore.MemoryOptions{})
	now := time.Unix(1_790_000_000, 0)
	user := policy.StackItem{Limit: "user", Key: "alice", Params: ratelimit.Limit{Limit: 50, Period: time.Hour, Mode: ratelimit.Strict},
		Cost: 1, Count: true, Refuses: true}
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				client := policy.StackItem{Limit: "client", Key: fmt.Sprintf("192.0.2.%d", (g*200+i)%250), Params: ratelimit.Limit{Limit: 1e6, Period: time.Hour},
					Cost: 1, Count: true, Refuses: true}
				items := []policy.StackItem{user, client}
				if i%2 == 1 {
					items[0], items[1] = client, user
				}
				out := make([]policy.StackResult, 2)
				if err := m.EvaluateStack(context.Background(), now, items, false, out); err != nil {
					t.Error(err)
					return
				}
				if !out[0].Result.Over && !out[1].Result.Over {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := admitted.Load(); n != 50 {
		t.Fatalf("%d of 1,600 concurrent stacks admitted, want exactly 50", n)
	}
}

// BenchmarkEvaluateStack100k is the default stack (200/hour leaky plus
// 1000/day strict, one rate key) of users picked at random from 100,000
// whose states exist, the rate store's share of a RCPT request.
func BenchmarkEvaluateStack100k(b *testing.B) {
	ctx := context.Background()
	m := ratestore.NewMemory(ratestore.MemoryOptions{})
	items := []policy.StackItem{
		{Limit: "hourly", Params: ratelimit.Limit{Limit: 200, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
		{Limit: "daily", Params: ratelimit.Limit{Limit: 1000, Period: 24 * time.Hour, Mode: ratelimit.Strict}, Cost: 1, Count: true, Refuses: true},
	}
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%07d", i)
	}
	now := time.Unix(1_790_000_000, 0)
	var out [2]policy.StackResult
	stack := func(key string) {
		items[0].Key, items[1].Key = key, key
		if err := m.EvaluateStack(ctx, now, items, false, out[:]); err != nil {
			b.Fatal(err)
		}
	}
	for _, k := range keys {
		stack(k)
	}
	r := rand.New(rand.NewPCG(1, 2))
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		stack(keys[r.IntN(len(keys))])
	}
}
