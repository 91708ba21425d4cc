package ratestore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

type pair = [2]string

func set(s ratelimit.State) func(ratelimit.State) (ratelimit.State, bool) {
	return func(ratelimit.State) (ratelimit.State, bool) { return s, true }
}

// contents returns every state m holds.
func contents(t testing.TB, m interface {
	Range(context.Context, func(limit, key string, s ratelimit.State) bool) error
}) map[pair]ratelimit.State {
	t.Helper()
	out := make(map[pair]ratelimit.State)
	err := m.Range(context.Background(), func(limit, key string, s ratelimit.State) bool {
		if _, dup := out[pair{limit, key}]; dup {
			t.Errorf("Range: %s/%s twice", limit, key)
		}
		out[pair{limit, key}] = s
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalStates(t testing.TB, what string, got, want map[pair]ratelimit.State) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d states, want %d", what, len(got), len(want))
	}
	n := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			if n++; n <= 5 {
				t.Errorf("%s: %s/%s = %v (present %v), want %v", what, k[0], k[1], g, ok, w)
			}
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			if n++; n <= 5 {
				t.Errorf("%s: unexpected %s/%s = %v", what, k[0], k[1], g)
			}
		}
	}
}

// TakeDirty calls put for each state changed and del for each key removed
// since the last call, and clears the marks (takeDirty by name).
func (m *Memory) TakeDirty(put func(limit, key string, s ratelimit.State), del func(limit, key string)) {
	var names []string
	m.takeDirty(func(lim uint16, key []byte, s ratelimit.State, deleted bool) {
		if deleted {
			del(m.limits.name(lim, &names), string(key))
		} else {
			put(m.limits.name(lim, &names), string(key), s)
		}
	}, nil)
}

// takeInto applies TakeDirty's reports to mirror, the way a persistence
// layer would.
func takeInto(m *Memory, mirror map[pair]ratelimit.State) {
	m.TakeDirty(func(limit, key string, s ratelimit.State) {
		mirror[pair{limit, key}] = s
	}, func(limit, key string) {
		delete(mirror, pair{limit, key})
	})
}

// checkInvariants verifies the internal structure of every shard.
func checkInvariants(t testing.TB, m *Memory) {
	t.Helper()
	total := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		inTable := 0
		for pos, s := range sh.table {
			if s == 0 {
				continue
			}
			inTable++
			x := s&idxMask - 1
			e := sh.at(x)
			if e.flags&fLive == 0 || e.flags&fDead != 0 {
				t.Errorf("shard %d pos %d: entry %d flags %b", i, pos, x, e.flags)
				continue
			}
			if int(e.keyOff)+int(e.keyLen) > len(sh.arena) {
				t.Errorf("shard %d entry %d: key beyond arena", i, x)
				continue
			}
			key := sh.key(e)
			h := maphash.Bytes(sh.seed, key)
			if h>>shardShift != uint64(i) {
				t.Errorf("shard %d entry %d: key %q belongs to shard %d", i, x, key, h>>shardShift)
			}
			if p, idx, ok := find(sh, e.lim, key, h); !ok || idx != x || int(p) != pos {
				t.Errorf("shard %d entry %d (%q): find = %d, %d, %v; want %d", i, x, key, p, idx, ok, pos)
			}
		}
		if inTable != sh.live {
			t.Errorf("shard %d: %d in table, live %d", i, inTable, sh.live)
		}
		if len(sh.table) > 0 && sh.live*4 > len(sh.table)*3 {
			t.Errorf("shard %d: table %d over 3/4 full with %d", i, len(sh.table), sh.live)
		}
		free := 0
		for f := sh.free; f != 0; f = sh.at(f - 1).keyOff {
			if sh.at(f-1).flags != 0 {
				t.Errorf("shard %d: free entry %d has flags", i, f-1)
				break
			}
			if free++; free > int(sh.slots) {
				t.Errorf("shard %d: free list loops", i)
				break
			}
		}
		used := 0
		for x := range sh.slots {
			if sh.at(x).flags&(fLive|fDead) != 0 {
				used++
			}
		}
		if used+free != int(sh.slots) {
			t.Errorf("shard %d: %d used + %d free != %d slots", i, used, free, sh.slots)
		}
		total += sh.live
		sh.mu.Unlock()
	}
	if total != m.Len() {
		t.Errorf("Len() = %d, shards hold %d", m.Len(), total)
	}
}

func TestEntrySize(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 32 {
		t.Errorf("entry is %d bytes, want 32", n)
	}
}

// TestMemoryModel runs random operations against Memory and a map, with
// and without change tracking; with tracking, what TakeDirty reports must
// rebuild exactly the contents.
func TestMemoryModel(t *testing.T) {
	steps := 200_000
	if testing.Short() || raceEnabled {
		steps = 50_000
	}
	for _, track := range []bool{false, true} {
		t.Run(fmt.Sprintf("track=%v", track), func(t *testing.T) {
			ctx := context.Background()
			m := NewMemory(MemoryOptions{})
			mirror := map[pair]ratelimit.State{}
			if track {
				m.startTracking()
			}
			model := map[pair]ratelimit.State{}
			rng := rand.New(rand.NewPCG(1, uint64(steps)))
			limits := []string{"hourly", "daily", "bytes"}
			for step := 1; step <= steps; step++ {
				l := limits[rng.IntN(len(limits))]
				n := rng.IntN(3000)
				k := strings.Repeat("k", n%37) + strconv.Itoa(n) // lengths 1..40
				if n%500 == 0 {
					k = "" // the empty key is a key too
				}
				pk := pair{l, k}
				switch op := rng.IntN(1000); {
				case op < 500:
					v := ratelimit.State{Time: int64(step), Rate: float64(step)}
					store := rng.IntN(10) != 0
					var saw ratelimit.State
					if err := m.Update(ctx, l, k, func(old ratelimit.State) (ratelimit.State, bool) {
						saw = old
						return v, store
					}); err != nil {
						t.Fatal(err)
					}
					if saw != model[pk] {
						t.Fatalf("step %d: Update(%s/%q) saw %v, want %v", step, l, k, saw, model[pk])
					}
					if store {
						model[pk] = v
					}
				case op < 800:
					if s, _ := m.Get(ctx, l, k); s != model[pk] {
						t.Fatalf("step %d: Get(%s/%q) = %v, want %v", step, l, k, s, model[pk])
					}
				case op < 950:
					_, want := model[pk]
					if ok, _ := m.Delete(ctx, l, k); ok != want {
						t.Fatalf("step %d: Delete(%s/%q) = %v, want %v", step, l, k, ok, want)
					}
					delete(model, pk)
				case op < 952:
					swept := m.Sweep(func(_ string, s ratelimit.State) bool { return int(s.Rate)%7 == 0 })
					want := 0
					for k, s := range model {
						if int(s.Rate)%7 == 0 {
							delete(model, k)
							want++
						}
					}
					if swept != want {
						t.Fatalf("step %d: Sweep = %d, want %d", step, swept, want)
					}
				case op < 970:
					if track {
						takeInto(m, mirror)
						if step%10 == 0 {
							equalStates(t, "mirror", mirror, model)
						}
					}
				default:
					if _, held := model[pk]; !track && !held { // load bypasses tracking by design
						v := ratelimit.State{Time: -int64(step), Rate: 1}
						lim, _ := m.limits.intern(l)
						if !m.load(lim, []byte(k), v) {
							t.Fatalf("step %d: load(%s/%q) not stored", step, l, k)
						}
						model[pk] = v
					}
				}
				if m.Len() != len(model) {
					t.Fatalf("step %d: Len() = %d, want %d", step, m.Len(), len(model))
				}
				if step%20_000 == 0 {
					checkInvariants(t, m)
				}
			}
			checkInvariants(t, m)
			equalStates(t, "Range", contents(t, m), model)
			if track {
				takeInto(m, mirror)
				equalStates(t, "mirror", mirror, model)
				takeInto(m, mirror) // nothing changed: nothing reported
				equalStates(t, "mirror", mirror, model)
			}
		})
	}
}

func TestMemoryTakeDirtyFirstCallReportsAll(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{})
	for i := range 100 {
		m.Update(ctx, "hourly", fmt.Sprint("u", i), set(ratelimit.State{Time: int64(i + 1), Rate: 1}))
	}
	m.Delete(ctx, "hourly", "u0")
	mirror := map[pair]ratelimit.State{}
	takeInto(m, mirror)
	equalStates(t, "first TakeDirty", mirror, contents(t, m))
	n := 0
	m.TakeDirty(func(string, string, ratelimit.State) { n++ }, func(string, string) { n++ })
	if n != 0 {
		t.Errorf("second TakeDirty reported %d changes, want 0", n)
	}
}

func TestMemoryEviction(t *testing.T) {
	ctx := context.Background()
	const maxKeys = 64 * 8
	m := NewMemory(MemoryOptions{MaxKeys: maxKeys})
	m.startTracking()
	mirror := map[pair]ratelimit.State{}
	offender := ratelimit.State{Time: 1, Rate: 1000}
	m.Update(ctx, "hourly", "offender", set(offender))
	for i := range 20_000 {
		// The offender keeps sending and so stays recent.
		m.Update(ctx, "hourly", "offender", func(s ratelimit.State) (ratelimit.State, bool) {
			s.Time++
			return s, true
		})
		m.Update(ctx, "hourly", fmt.Sprintf("random%d", i), set(ratelimit.State{Time: int64(i + 1), Rate: 1}))
		if i%1000 == 0 {
			takeInto(m, mirror)
		}
	}
	if m.Len() > maxKeys {
		t.Errorf("Len() = %d > MaxKeys %d", m.Len(), maxKeys)
	}
	if got, want := m.Evicted(), int64(20_001-m.Len()); got != want {
		t.Errorf("Evicted() = %d, want %d", got, want)
	}
	if s, _ := m.Get(ctx, "hourly", "offender"); s.Time != offender.Time+20_000 {
		t.Errorf("offender state %v: evicted while sending", s)
	}
	takeInto(m, mirror)
	equalStates(t, "mirror after evictions", mirror, contents(t, m))
	checkInvariants(t, m)
}

// TestMemoryEvictionChurn evicts without change tracking and without
// deletes or sweeps: the key arena must stay bounded all the same.
func TestMemoryEvictionChurn(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{MaxKeys: 64 * 8})
	for i := range 100_000 {
		m.Update(ctx, "hourly", fmt.Sprintf("sender-%08d@example.org", i), set(ratelimit.State{Time: 1, Rate: 1}))
	}
	n := 0
	for i := range m.shards {
		n += len(m.shards[i].arena)
	}
	if max := 64 * (8*24 + 2*compactMin); n > max {
		t.Errorf("arena holds %d bytes for %d keys, want <= %d", n, m.Len(), max)
	}
	checkInvariants(t, m)
}

func TestMemoryArenaCompacts(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{})
	const n, keep = 50_000, 500
	key := func(i int) string { return fmt.Sprintf("sender-%08d@example.org", i) }
	for i := range n {
		m.Update(ctx, "hourly", key(i), set(ratelimit.State{Time: 1, Rate: 1}))
		m.Update(ctx, "daily", key(i), set(ratelimit.State{Time: 1, Rate: 2}))
	}
	arena := func() (n int) {
		for i := range m.shards {
			n += len(m.shards[i].arena)
		}
		return n
	}
	if got, want := arena(), n*len(key(0)); got != want {
		t.Errorf("arena holds %d bytes for %d keys of %d bytes under two limits, want %d (shared)", got, n, len(key(0)), want)
	}
	for i := keep; i < n; i++ {
		m.Delete(ctx, "hourly", key(i))
	}
	if got, want := arena(), n*len(key(0)); got != want {
		t.Errorf("arena holds %d bytes, want %d (all still used by daily)", got, want)
	}
	for i := keep; i < n; i++ {
		m.Delete(ctx, "daily", key(i))
	}
	if got, max := arena(), keep*len(key(0))+2*numShards*compactMin; got > max {
		t.Errorf("arena holds %d bytes for %d keys, want <= %d", got, keep, max)
	}
	for i := range keep {
		if s, _ := m.Get(ctx, "daily", key(i)); s.Rate != 2 {
			t.Fatalf("daily/%s = %v after compaction", key(i), s)
		}
	}
	checkInvariants(t, m)
}

func TestMemoryNoAllocs(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{})
	m.startTracking()
	m.Update(ctx, "hourly", "alice@example.org", set(ratelimit.State{Time: 1, Rate: 1}))
	s := ratelimit.State{Time: 2, Rate: 2}
	fn := set(s)
	if n := testing.AllocsPerRun(1000, func() { m.Get(ctx, "hourly", "alice@example.org") }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
	if n := testing.AllocsPerRun(1000, func() { m.Update(ctx, "hourly", "alice@example.org", fn) }); n != 0 {
		t.Errorf("Update of a known key allocates %v times", n)
	}
}

func TestMemoryConcurrent(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{MaxKeys: 64 * 4})
	mirror := map[pair]ratelimit.State{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				k := fmt.Sprint("u", (g*7919+i)%700)
				switch i % 10 {
				case 0:
					m.Delete(ctx, "daily", k)
				case 1:
					m.Get(ctx, "hourly", k)
				default:
					m.Update(ctx, []string{"hourly", "daily"}[i%2], k, func(s ratelimit.State) (ratelimit.State, bool) {
						return ratelimit.State{Time: s.Time + 1, Rate: float64(i)}, true
					})
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			takeInto(m, mirror)
			m.Sweep(func(_ string, s ratelimit.State) bool { return s.Rate == 3 })
			m.Range(ctx, func(string, string, ratelimit.State) bool { return true })
			runtime.Gosched()
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	takeInto(m, mirror)
	equalStates(t, "mirror", mirror, contents(t, m))
	checkInvariants(t, m)
}

// fill stores users keys under "hourly" and "daily", as a daemon with two
// limits and that many senders holds them.
func fill(tb testing.TB, m *Memory, users int) {
	ctx := context.Background()
	buf := make([]byte, 0, 16)
	for i := range users {
		buf = strconv.AppendInt(append(buf[:0], "user"...), int64(1e7+i), 10)
		buf[4] = '0' // user0000001
		k := string(buf)
		s := ratelimit.State{Time: int64(i), Rate: 1}
		if err := m.Update(ctx, "hourly", k, set(s)); err != nil {
			tb.Fatal(err)
		}
		if err := m.Update(ctx, "daily", k, set(s)); err != nil {
			tb.Fatal(err)
		}
	}
}

// heapPerPair builds a store of users*2 pairs and returns the live heap
// bytes it costs per pair, and its Footprint per pair.
func heapPerPair(tb testing.TB, users int) (heap, footprint float64) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := NewMemory(MemoryOptions{})
	m.startTracking() // as under Persistent
	fill(tb, m, users)
	for range 2 { // a flush, then a quiet one: the change lists shrink
		m.takeDirty(func(uint16, []byte, ratelimit.State, bool) {}, nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	pairs := float64(2 * users)
	heap = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / pairs
	footprint = float64(m.Footprint()) / pairs
	runtime.KeepAlive(m)
	return heap, footprint
}

// TestMemoryFootprint measures the heap held by 1,000,000 users under two
// limits (100,000 with -race or -short).
func TestMemoryFootprint(t *testing.T) {
	users := 1_000_000
	if testing.Short() || raceEnabled {
		users = 100_000
	}
	heap, fp := heapPerPair(t, users)
	t.Logf("%d pairs: %.1f heap bytes/pair (%.1f MiB), footprint %.1f bytes/pair", 2*users, heap, heap*float64(2*users)/(1<<20), fp)
	if heap > 64 {
		t.Errorf("%.1f heap bytes per pair, want <= 64", heap)
	}
}

func BenchmarkMemory2M(b *testing.B) {
	var heap, fp float64
	for b.Loop() {
		heap, fp = heapPerPair(b, 1_000_000)
	}
	b.ReportMetric(heap, "heap-B/pair")
	b.ReportMetric(fp, "footprint-B/pair")
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user%07d", i)
	}
	return keys
}

func BenchmarkUpdate(b *testing.B) {
	ctx := context.Background()
	keys := benchKeys(100_000)
	m := NewMemory(MemoryOptions{})
	m.startTracking()
	for _, k := range keys {
		m.Update(ctx, "hourly", k, set(ratelimit.State{Time: 1, Rate: 1}))
	}
	fn := func(s ratelimit.State) (ratelimit.State, bool) {
		s.Time++
		return s, true
	}
	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			m.Update(ctx, "hourly", keys[i%len(keys)], fn)
			i += 7919
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := rand.IntN(len(keys))
			for pb.Next() {
				m.Update(ctx, "hourly", keys[i%len(keys)], fn)
				i += 7919
			}
		})
	})
}

// BenchmarkTakeDirty10kOf1M takes 10,000 changes out of a store of
// 1,000,000 pairs: the cost follows the changes, not the store size.
func BenchmarkTakeDirty10kOf1M(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	m.startTracking()
	fill(b, m, 500_000)
	m.takeDirty(func(uint16, []byte, ratelimit.State, bool) {}, nil)
	// Mark 10,000 entries changed directly, as Update would, so that the
	// untimed part of each round stays short.
	type ref struct {
		sh *shard
		x  uint32
	}
	var changed []ref
	for i := range m.shards {
		sh := &m.shards[i]
		for x := uint32(0); x < sh.slots && len(changed) < 10_000; x += 50 {
			changed = append(changed, ref{sh, x})
		}
	}
	n := 0
	for b.Loop() {
		b.StopTimer()
		for _, c := range changed {
			c.sh.markDirty(c.x, c.sh.at(c.x))
		}
		b.StartTimer()
		m.takeDirty(func(uint16, []byte, ratelimit.State, bool) { n++ }, nil)
	}
	if n != b.N*len(changed) {
		b.Fatalf("took %d changes, want %d", n, b.N*len(changed))
	}
}

// TestEvaluateStackNoAllocs checks that deciding a stack allocates
// nothing once its states exist, whether its keys share a shard or not
// (limits by user and by client address).
func TestEvaluateStackNoAllocs(t *testing.T) {
	m := NewMemory(MemoryOptions{})
	lim := ratelimit.Limit{Limit: 1e9, Period: time.Hour}
	stacks := [][]policy.StackItem{
		{{Limit: "hourly", Key: "alice", Params: lim, Cost: 1, Count: true}, {Limit: "daily", Key: "alice", Params: lim, Cost: 1, Count: true}},
		{{Limit: "user", Key: "alice", Params: lim, Cost: 1, Count: true}, {Limit: "client", Key: "192.0.2.1", Params: lim, Cost: 1, Count: true},
			{Limit: "domain", Key: "example.org", Params: lim, Cost: 1, Count: true}},
	}
	out := make([]policy.StackResult, 3)
	now := time.Unix(1_790_000_000, 0)
	for _, items := range stacks {
		if err := m.EvaluateStack(context.Background(), now, items, false, out); err != nil {
			t.Fatal(err)
		}
		if a := testing.AllocsPerRun(200, func() { m.EvaluateStack(context.Background(), now, items, false, out) }); a != 0 {
			t.Errorf("stack of %d limits: %v allocations, want 0", len(items), a)
		}
	}
}
