//go:build integration

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// hourly is a leaky 10/hour limit refusing over it.
func hourly(key string) []policy.StackItem {
	return []policy.StackItem{{Limit: "hourly", Key: key, Params: ratelimit.Limit{Limit: 10, Period: time.Hour},
		Cost: 1, Count: true, Refuses: true}}
}

// newFailover is a Failover with local fallback over r, with a fast probe.
func newFailover(t *testing.T, r *redisstore.Store) (*redisstore.Failover, *mtatest.SyncBuffer) {
	logs := &mtatest.SyncBuffer{}
	f := redisstore.NewFailover(r, ratestore.NewMemory(ratestore.MemoryOptions{}), slog.New(slog.NewTextHandler(logs, nil)),
		redisstore.FailoverOptions{ProbeInterval: 50 * time.Millisecond})
	t.Cleanup(f.Close)
	return f, logs
}

// load runs n goroutines deciding requests of their own users on f until
// stop is closed (at most 100,000 requests each) and returns how many
// were answered and how many failed.
func load(f policy.StackEvaluator, n int, stop <-chan struct{}) (wait func() (answered, failed int64, slowest time.Duration)) {
	var ok, bad, slow atomic.Int64
	var wg sync.WaitGroup
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100000 {
				select {
				case <-stop:
					return
				default:
				}
				out := make([]policy.StackResult, 1)
				start := time.Now()
				err := f.EvaluateStack(context.Background(), time.Now(), hourly(fmt.Sprintf("load%d-%d", g, i%50)), false, out)
				if d := int64(time.Since(start)); d > slow.Load() {
					slow.Store(d)
				}
				if err != nil {
					bad.Add(1)
				} else {
					ok.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	return func() (int64, int64, time.Duration) {
		wg.Wait()
		return ok.Load(), bad.Load(), time.Duration(slow.Load())
	}
}

// waitUntil polls cond every 20ms for up to a minute (a Sentinel election
// that fails is retried after twice the failover timeout; a loaded machine
// may need several).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func decide(t *testing.T, f policy.StackEvaluator, key string) policy.StackResult {
	t.Helper()
	out := make([]policy.StackResult, 1)
	if err := f.EvaluateStack(context.Background(), time.Now(), hourly(key), false, out); err != nil {
		t.Fatalf("request of %s: %v", key, err)
	}
	return out[0]
}

// TestFailoverPausedRedis: Redis SIGSTOPped under load. Every request is
// answered (from local state, after at most one timeout), the switch and
// the recovery are logged once each, and a sender refused during the
// outage is still refused once Redis is back (the stricter local state
// was pushed).
func TestFailoverPausedRedis(t *testing.T) {
	redistest.Exclusive(t) // the load and its latency budget
	srv := redistest.Start(t)
	r := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 500 * time.Millisecond})
	f, logs := newFailover(t, r)
	decide(t, f, "warmup")
	stop := make(chan struct{})
	wait := load(f, 8, stop)
	time.Sleep(100 * time.Millisecond)
	srv.Stop()
	waitUntil(t, "the switch to local state", f.Degraded)
	// zed sends 11 messages during the outage: the 11th is refused.
	for i := range 11 {
		if over := decide(t, f, "zed").Result.Over; over != (i == 10) {
			t.Fatalf("outage: zed's message %d over=%v", i+1, over)
		}
	}
	if st := f.Status(); !st.Degraded || st.Switches != 1 || st.LastError == "" {
		t.Errorf("status during the outage: %+v", st)
	}
	srv.Resume()
	// Shared again as soon as a probe succeeds, then the outage's counts
	// are added (the merge).
	waitUntil(t, "the recovery and its merge", func() bool {
		merges, _ := f.Merges()
		return !f.Degraded() && merges >= 1
	})
	close(stop)
	answered, failed, slowest := wait()
	t.Logf("%d requests answered, %d failed; slowest %v", answered, failed, slowest)
	if failed != 0 || answered == 0 {
		t.Errorf("under load across the outage: %d answered, %d failed", answered, failed)
	}
	if n := strings.Count(logs.String(), `msg="redis unavailable`); n != 1 {
		t.Errorf("switch logged %d times, want once:\n%s", n, logs)
	}
	if n := strings.Count(logs.String(), `msg="redis available again`); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs)
	}
	if st := f.Status(); st.Degraded || st.Recoveries != 1 {
		t.Errorf("status after recovery: %+v", st)
	}
	// Shared again: zed's state is in Redis, and zed is still refused.
	if st, err := r.Get(context.Background(), "hourly", "zed"); err != nil || st.Rate < 9.9 {
		t.Errorf("zed's outage state in Redis after recovery: %+v, %v", st, err)
	}
	if res := decide(t, f, "zed"); !res.Result.Over {
		t.Errorf("after the outage zed is admitted again (rate %v): the local state was not pushed", res.Result.Rate)
	}
}

// TestFailoverPolicies: with dunno or defer, a request Redis cannot answer
// returns ErrUnavailable (the daemon answers DUNNO or 450).
func TestFailoverPolicies(t *testing.T) {
	srv := redistest.Start(t)
	for _, p := range []redisstore.OnError{redisstore.Dunno, redisstore.Defer} {
		r := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 500 * time.Millisecond})
		f := redisstore.NewFailover(r, ratestore.NewMemory(ratestore.MemoryOptions{}), slog.New(slog.DiscardHandler), redisstore.FailoverOptions{OnError: p})
		t.Cleanup(f.Close)
		decide(t, f, "x")
		srv.Stop()
		out := make([]policy.StackResult, 1)
		err := f.EvaluateStack(context.Background(), time.Now(), hourly("x"), false, out)
		srv.Resume()
		if !errors.Is(err, redisstore.ErrUnavailable) {
			t.Errorf("%v: request during the outage: %v", p, err)
		}
	}
}

// TestSentinelFailover: master + replica + 3 Sentinels; the master is
// SIGKILLed under load. No request is left unanswered (local state during
// the failover), and the store follows the new master.
func TestSentinelFailover(t *testing.T) {
	redistest.Exclusive(t) // the load and its latency budget
	ss := redistest.StartSentinels(t)
	r := open(t, redisstore.Options{Addrs: ss.Addrs(), SentinelMaster: ss.Name, Timeout: 200 * time.Millisecond})
	f, logs := newFailover(t, r)
	decide(t, f, "before")
	// Replication is asynchronous (and the replica's first sync may still
	// run): the master is killed once the replica holds "before".
	waitUntil(t, "the replica to hold the state written before", func() bool {
		return ss.Replica.Must("EXISTS", r.Key("before")) == "1"
	})
	stop := make(chan struct{})
	wait := load(f, 8, stop)
	time.Sleep(100 * time.Millisecond)
	ss.Master.Kill()
	waitUntil(t, "the sentinels to promote the replica", func() bool { return ss.MasterAddr() == ss.Replica.Addr })
	waitUntil(t, "the store to follow the new master", func() bool {
		out := make([]policy.StackResult, 1)
		return f.EvaluateStack(context.Background(), time.Now(), hourly("after"), false, out) == nil && !f.Degraded() &&
			ss.Replica.Must("EXISTS", r.Key("after")) == "1"
	})
	close(stop)
	answered, failed, slowest := wait()
	t.Logf("%d requests answered, %d failed; slowest %v; log:\n%s", answered, failed, slowest, logs)
	if failed != 0 || answered == 0 {
		t.Errorf("across the failover: %d answered, %d failed", answered, failed)
	}
	// The state written before the failover was replicated.
	if st, err := r.Get(context.Background(), "hourly", "before"); err != nil || st.IsZero() {
		t.Errorf("state written before the failover: %+v, %v", st, err)
	}
}

// TestMergeAddsOnce: after an outage a host's counts are added to the
// shared state in each limit's arithmetic (decayed rates and EARRRL
// counts summed, GCRA's backlog added to the arrival time), once per
// merge identifier however often the merge is retried; the merged key
// gets an expiry from the arithmetic.
func TestMergeAddsOnce(t *testing.T) {
	srv := redistest.Start(t)
	limits := map[string]ratelimit.Limit{
		"exp":    {Limit: 10, Period: time.Hour},
		"gcra":   {Limit: 10, Period: time.Hour, Algorithm: ratelimit.GCRA},
		"earrrl": {Limit: 10, Period: time.Hour, Algorithm: ratelimit.EARRRL},
	}
	r := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Limits: func(n string) (ratelimit.Limit, bool) {
		l, ok := limits[n]
		return l, ok
	}})
	ctx := context.Background()
	now, _ := r.Ping(ctx)
	ns := now.UnixNano()
	set := func(limit, key string, st ratelimit.State) {
		if err := r.Update(ctx, limit, key, func(ratelimit.State) (ratelimit.State, bool) { return st, true }); err != nil {
			t.Fatal(err)
		}
	}
	set("exp", "a", ratelimit.State{Time: ns, Rate: 5})
	set("gcra", "a", ratelimit.State{Time: ns + int64(30*time.Minute)})
	set("earrrl", "a", ratelimit.State{Time: ns, Rate: 4})
	merge := func(id string, want int) {
		t.Helper()
		for _, c := range []struct {
			limit string
			sts   []ratelimit.State
		}{
			{"exp", []ratelimit.State{{Time: ns, Rate: 9}, {Time: ns, Rate: 9}}},
			{"gcra", []ratelimit.State{{Time: ns + int64(20*time.Minute)}, {Time: ns + int64(20*time.Minute)}}},
			{"earrrl", []ratelimit.State{{Time: ns, Rate: 3}, {Time: ns, Rate: 3}}},
		} {
			n, err := r.Merge(ctx, id, c.limit, []string{"a", "b"}, c.sts)
			if err != nil || n != want {
				t.Fatalf("merge %s of %s added %d (%v), want %d", id, c.limit, n, err, want)
			}
		}
	}
	merge("outage1", 2)
	merge("outage1", 0) // retried: nothing twice
	for _, c := range []struct {
		limit, key string
		want       float64 // rate, or the arrival time's minutes ahead
	}{
		{"exp", "a", 14}, {"exp", "b", 9}, {"gcra", "a", 50}, {"gcra", "b", 20}, {"earrrl", "a", 7}, {"earrrl", "b", 3},
	} {
		got, err := r.Get(ctx, c.limit, c.key)
		v := got.Rate
		if c.limit == "gcra" {
			v = float64(got.Time-ns) / float64(time.Minute)
		}
		if err != nil || math.Abs(v-c.want) > 0.01 {
			t.Errorf("%s %s after merge: %+v (%v), want %v", c.limit, c.key, got, err, c.want)
		}
		// The expiry follows the limit's arithmetic (EARRRL's estimate is
		// negligible below a millionth of the limit: about 16 periods
		// here), not DefaultTTL.
		ttl := srv.Must("PTTL", r.Key(c.key))
		if ms, err := strconv.ParseInt(ttl, 10, 64); err != nil || ms < 0 || ms > int64(20*time.Hour/time.Millisecond) {
			t.Errorf("%s %s: PTTL %s, want an expiry within 20h", c.limit, c.key, ttl)
		}
	}
	merge("outage2", 2) // another outage adds again
	if got, _ := r.Get(ctx, "exp", "b"); math.Abs(got.Rate-18) > 0.01 {
		t.Errorf("after a second outage's merge: %+v, want rate 18", got)
	}
}

// TestFailoverRestoresLostState: two hosts share a sender at the limit
// (10/h); Redis loses its data (FLUSHALL). Of the sender's next 20
// messages, each through a host picked at random, at most one per host
// is admitted: the first host to see the state missing restores it from
// its own copy. A sender reset (Delete) through one host is not restored
// by the other from its older copy: the reset stands. Repeated 5 times.
func TestFailoverRestoresLostState(t *testing.T) {
	srv := redistest.Start(t)
	for round := range 5 {
		var hosts []*redisstore.Failover
		for range 2 {
			f, _ := newFailover(t, open(t, redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: fmt.Sprintf("shared%d:", round)}))
			hosts = append(hosts, f)
		}
		send := func(key string, n int, random bool) (admitted int) {
			for i := range n {
				h := hosts[i%2]
				if random {
					h = hosts[rand.IntN(2)]
				}
				if !decide(t, h, key).Result.Over {
					admitted++
				}
			}
			return admitted
		}
		lost, reset := fmt.Sprintf("lost%d", round), fmt.Sprintf("reset%d", round)
		if n := send(lost, 12, false); n != 10 {
			t.Fatalf("round %d: %d of 12 admitted before the loss, want 10", round, n)
		}
		if n := send(reset, 12, false); n != 10 {
			t.Fatalf("round %d: %d of 12 admitted before the reset, want 10", round, n)
		}
		if _, err := hosts[0].Delete(context.Background(), "hourly", reset); err != nil {
			t.Fatal(err)
		}
		if n := send(reset, 12, true); n != 10 {
			t.Errorf("round %d: after a reset through one host, %d of 12 admitted, want 10 (the other host's copy restored?)", round, n)
		}
		srv.Must("FLUSHALL")
		if n := send(lost, 20, true); n > 2 {
			t.Errorf("round %d: after FLUSHALL, %d of 20 admitted through 2 hosts, want at most one per host", round, n)
		}
		if hosts[0].Status().StatesRestored+hosts[1].Status().StatesRestored == 0 {
			t.Errorf("round %d: no host restored a state after FLUSHALL", round)
		}
	}
}

// TestFailoverRestoresEveryLostState: a host that sees one state lost
// (FLUSHALL) restores, in the background, every other state it holds a
// copy of, before their senders send again: 50 senders of 5 messages,
// FLUSHALL, one message of the first: within 5s Redis holds each of the
// 49 others at its rate again. Repeated 3 times (restoreAll runs at
// most once a second).
func TestFailoverRestoresEveryLostState(t *testing.T) {
	srv := redistest.Start(t)
	for round := range 3 {
		r := open(t, redisstore.Options{Addrs: []string{srv.Addr}, KeyPrefix: fmt.Sprintf("every%d:", round),
			Limits: func(string) (ratelimit.Limit, bool) { return ratelimit.Limit{Limit: 10, Period: time.Hour}, true }})
		f, _ := newFailover(t, r)
		user := func(i int) string { return fmt.Sprintf("u%d-%d", round, i) }
		for i := range 50 {
			for range 5 {
				decide(t, f, user(i))
			}
		}
		srv.Must("FLUSHALL")
		decide(t, f, user(0))
		restored := func() int {
			n := 0
			for i := 1; i < 50; i++ {
				if st, err := r.Get(context.Background(), "hourly", user(i)); err == nil && st.Rate > 4.9 {
					n++
				}
			}
			return n
		}
		deadline := time.Now().Add(5 * time.Second)
		for restored() < 49 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n := restored(); n != 49 {
			t.Errorf("round %d: %d of 49 states restored without a message of their senders, want all", round, n)
		}
		time.Sleep(time.Second) // restoreAll's interval
	}
}

// TestFailoverConcurrentSameKeyRestoresNothing: requests for the same
// few senders, concurrent through one host, find the host's copy written
// by one decided after them: that is no loss. Nothing is restored and
// Redis counts each sender's messages exactly.
func TestFailoverConcurrentSameKeyRestoresNothing(t *testing.T) {
	srv := redistest.Start(t)
	limit := ratelimit.Limit{Limit: 100000, Period: time.Hour}
	r := open(t, redisstore.Options{Addrs: []string{srv.Addr},
		Limits: func(string) (ratelimit.Limit, bool) { return limit, true }})
	f, _ := newFailover(t, r)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for range 50 {
				out := make([]policy.StackResult, 1)
				items := []policy.StackItem{{Limit: "hourly", Key: fmt.Sprintf("same%d", g%4), Params: limit, Cost: 1, Count: true, Refuses: true}}
				if err := f.EvaluateStack(context.Background(), time.Now(), items, false, out); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	if n := f.Status().StatesRestored; n != 0 {
		t.Errorf("%d states restored without a loss", n)
	}
	for u := range 4 {
		st, err := r.Get(context.Background(), "hourly", fmt.Sprintf("same%d", u))
		if err != nil {
			t.Fatal(err)
		}
		if st.Rate < 399 || st.Rate > 400.01 {
			t.Errorf("sender %d: rate %v after 400 messages, want 400", u, st.Rate)
		}
	}
}
