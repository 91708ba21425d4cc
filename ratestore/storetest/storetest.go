package storetest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// Tolerance is the largest relative difference allowed between a rate
// measured by the store under test and by the reference.
const Tolerance = 1e-12

// Opener returns a new, empty store for one subtest, closed at t.Cleanup.
type Opener func(t *testing.T) policy.Store

// Run runs the whole suite against the stores open returns.
func Run(t *testing.T, open Opener) {
	t.Run("Contract", func(t *testing.T) { testContract(t, open(t)) })
	t.Run("Burst", func(t *testing.T) { testBurst(t, open(t)) })
	all := []ratelimit.Mode{ratelimit.Leaky, ratelimit.Strict, ratelimit.Forgiving, ratelimit.Readonly}
	exp := []ratelimit.Algorithm{ratelimit.Exponential}
	for _, m := range all {
		t.Run("Trace/"+m.String(), func(t *testing.T) { testTrace(t, open(t), []ratelimit.Mode{m}, exp, uint64(m)+1) })
	}
	t.Run("Trace/mixed", func(t *testing.T) { testTrace(t, open(t), all, exp, 99) })
	for _, a := range []ratelimit.Algorithm{ratelimit.GCRA, ratelimit.Cooldown, ratelimit.EARRRL} {
		for _, m := range all {
			t.Run("Trace/"+a.String()+"/"+m.String(), func(t *testing.T) {
				testTrace(t, open(t), []ratelimit.Mode{m}, []ratelimit.Algorithm{a}, 100+uint64(a)*10+uint64(m))
			})
		}
	}
	t.Run("Trace/every-algorithm", func(t *testing.T) {
		testTrace(t, open(t), all, []ratelimit.Algorithm{ratelimit.Exponential, ratelimit.GCRA, ratelimit.Cooldown, ratelimit.EARRRL}, 7)
	})
}

// Evaluate decides items on st at now: through st's own StackEvaluator if
// it has one, else through policy.EvaluateStack.
func Evaluate(ctx context.Context, st policy.Store, now time.Time, items []policy.StackItem, refused bool) ([]policy.StackResult, error) {
	out := make([]policy.StackResult, len(items))
	var err error
	if se, ok := st.(policy.StackEvaluator); ok {
		err = se.EvaluateStack(ctx, now, items, refused, out)
	} else {
		err = policy.EvaluateStack(ctx, st, now, items, refused, out)
	}
	return out, err
}

// keys are rate keys of every shape, some a key-value store must escape.
var keys = []string{"alice", "bob@example.org", "192.0.2.0/24", "2001:db8::/48", "alice|192.0.2.1", "a}b{c%d", "{x}", ""}

func testContract(t *testing.T, st policy.Store) {
	ctx := context.Background()
	for _, k := range keys {
		if s, err := st.Get(ctx, "l", k); err != nil || !s.IsZero() {
			t.Fatalf("Get(%q) on an empty store = %+v, %v; want zero", k, s, err)
		}
	}
	want := map[[2]string]ratelimit.State{}
	for i, k := range keys {
		for j, l := range []string{"hourly", "daily"} {
			s := ratelimit.State{Time: 1_790_000_000_123_456_789 + int64(i*1000+j), Rate: 1.0/3 + float64(i)}
			if err := st.Update(ctx, l, k, func(old ratelimit.State) (ratelimit.State, bool) {
				if !old.IsZero() {
					t.Errorf("Update(%s, %q) saw %+v, want zero", l, k, old)
				}
				return s, true
			}); err != nil {
				t.Fatalf("Update(%s, %q): %v", l, k, err)
			}
			want[[2]string{l, k}] = s
		}
	}
	// fn returning false stores nothing.
	if err := st.Update(ctx, "hourly", "alice", func(old ratelimit.State) (ratelimit.State, bool) {
		return ratelimit.State{Time: 1, Rate: 1}, false
	}); err != nil {
		t.Fatal(err)
	}
	for lk, s := range want {
		got, err := st.Get(ctx, lk[0], lk[1])
		if err != nil || got != s {
			t.Errorf("Get(%s, %q) = %+v, %v; want %+v", lk[0], lk[1], got, err, s)
		}
	}
	seen := map[[2]string]ratelimit.State{}
	if err := st.Range(ctx, func(l, k string, s ratelimit.State) bool {
		seen[[2]string{l, k}] = s
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Errorf("Range saw %d states, want %d", len(seen), len(want))
	}
	for lk, s := range want {
		if seen[lk] != s {
			t.Errorf("Range: %s %q = %+v, want %+v", lk[0], lk[1], seen[lk], s)
		}
	}
	n := 0
	if err := st.Range(ctx, func(string, string, ratelimit.State) bool { n++; return false }); err != nil || n != 1 {
		t.Errorf("Range stopping at once called fn %d times (%v), want 1", n, err)
	}
	for _, k := range keys {
		ok, err := st.Delete(ctx, "hourly", k)
		if err != nil || !ok {
			t.Errorf("Delete(hourly, %q) = %v, %v; want true", k, ok, err)
		}
		if ok, _ := st.Delete(ctx, "hourly", k); ok {
			t.Errorf("second Delete(hourly, %q) reported state", k)
		}
		if s, _ := st.Get(ctx, "hourly", k); !s.IsZero() {
			t.Errorf("Get after Delete(hourly, %q) = %+v", k, s)
		}
		if s, _ := st.Get(ctx, "daily", k); s != want[[2]string{"daily", k}] {
			t.Errorf("Delete(hourly, %q) touched daily: %+v", k, s)
		}
	}
}

// testBurst: a fresh key is allowed exactly limit requests at one instant.
func testBurst(t *testing.T, st policy.Store) {
	ctx := context.Background()
	now := time.Unix(1_790_000_000, 5)
	it := []policy.StackItem{{Limit: "burst", Key: "alice", Params: ratelimit.Limit{Limit: 200, Period: time.Hour},
		Cost: 1, Count: true, Refuses: true}}
	admitted := 0
	for range 260 {
		out, err := Evaluate(ctx, st, now, it, false)
		if err != nil || out[0].Err != nil {
			t.Fatal(err, out[0].Err)
		}
		if !out[0].Result.Over {
			admitted++
		}
	}
	if admitted != 200 {
		t.Errorf("a burst of 260 at one instant admitted %d, want 200", admitted)
	}
}

// limitSet is the stack of a trace: distinct names, one mode and
// algorithm each.
func limitSet(r *rand.Rand, modes []ratelimit.Mode, algs []ratelimit.Algorithm) []policy.StackItem {
	periods := []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 1500 * time.Millisecond}
	var out []policy.StackItem
	for i := range 4 {
		out = append(out, policy.StackItem{
			Limit: fmt.Sprintf("l%d", i),
			Params: ratelimit.Limit{Limit: []float64{3, 10, 200, 2.5}[i], Period: periods[i],
				Mode: modes[r.IntN(len(modes))], Algorithm: algs[r.IntN(len(algs))]},
			Refuses: i != 3 || r.IntN(2) == 0,
		})
		if i == 1 && out[i].Params.Algorithm == ratelimit.EARRRL {
			out[i].Params.HalfLife = 10 * time.Minute
		}
	}
	return out
}

// testTrace replays a random trace on st and the reference, comparing.
func testTrace(t *testing.T, st policy.Store, modes []ratelimit.Mode, algs []ratelimit.Algorithm, seed uint64) {
	ctx := context.Background()
	ref := ratestore.NewMemory(ratestore.MemoryOptions{})
	r := rand.New(rand.NewPCG(seed, 7))
	limits := limitSet(r, modes, algs)
	now := time.Unix(1_790_000_000, r.Int64N(1e9))
	users := keys[:5]
	overs, stored := 0, 0
	for step := range 1500 {
		switch x := r.Float64(); {
		case x < 0.3:
		case x < 0.97:
			now = now.Add(time.Duration(r.ExpFloat64() * float64(20*time.Second)))
		default:
			now = now.Add(time.Duration(r.Float64() * float64(30*time.Hour)))
		}
		var items []policy.StackItem
		for _, li := range r.Perm(len(limits))[:1+r.IntN(3)] {
			it := limits[li]
			it.Key = users[r.IntN(len(users))]
			it.Cost = []float64{1, 1, 1, 2, 0.5, 0, 3.7}[r.IntN(7)]
			it.Count = r.IntN(8) != 0
			if r.IntN(10) == 0 {
				it.Params.Limit *= 2 // a per-key override
			}
			items = append(items, it)
		}
		slices.SortFunc(items, func(a, b policy.StackItem) int { return int(a.Limit[1]) - int(b.Limit[1]) })
		refused := r.IntN(12) == 0
		got, err := Evaluate(ctx, st, now, items, refused)
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		want := make([]policy.StackResult, len(items))
		err = policy.EvaluateStack(ctx, ref, now, items, refused, want)
		if err != nil {
			t.Fatalf("step %d: reference: %v", step, err)
		}
		for i := range items {
			if msg := diff(&got[i], &want[i]); msg != "" {
				t.Fatalf("step %d at %v, item %d (%s %q %v %v cost %g count %v refused %v): %s", step, now.UnixNano(), i,
					items[i].Limit, items[i].Key, items[i].Params.Algorithm, items[i].Params.Mode, items[i].Cost, items[i].Count,
					refused, msg)
			}
			if got[i].Result.Over {
				overs++
			}
			if got[i].Stored {
				stored++
			}
		}
	}
	// Readonly stores nothing, so EARRRL never goes over.
	if modes[0] != ratelimit.Readonly && (overs == 0 || stored == 0) {
		t.Errorf("trace too tame: %d over, %d stored", overs, stored)
	}
	for _, l := range limits {
		for _, k := range users {
			g, err1 := st.Get(ctx, l.Limit, k)
			w, err2 := ref.Get(ctx, l.Limit, k)
			if err1 != nil || err2 != nil || g.Time != w.Time || !near(g.Rate, w.Rate) {
				t.Errorf("final state %s %q = %+v (%v), reference %+v (%v)", l.Limit, k, g, err1, w, err2)
			}
		}
	}
}

// diff describes how g differs from the reference w ("" if it agrees).
func diff(g, w *policy.StackResult) string {
	switch {
	case (g.Err == nil) != (w.Err == nil):
		return fmt.Sprintf("error %v, reference %v", g.Err, w.Err)
	case g.Prev.Time != w.Prev.Time || !near(g.Prev.Rate, w.Prev.Rate):
		return fmt.Sprintf("previous state %+v, reference %+v", g.Prev, w.Prev)
	case g.Result.Over != w.Result.Over:
		return fmt.Sprintf("over %v (rate %v), reference %v (rate %v)", g.Result.Over, g.Result.Rate, w.Result.Over, w.Result.Rate)
	case !near(g.Result.Before, w.Result.Before) || !near(g.Result.Rate, w.Result.Rate):
		return fmt.Sprintf("rates %v→%v, reference %v→%v", g.Result.Before, g.Result.Rate, w.Result.Before, w.Result.Rate)
	case !closeDur(g.Result.RetryAfter, w.Result.RetryAfter):
		return fmt.Sprintf("retry after %v, reference %v", g.Result.RetryAfter, w.Result.RetryAfter)
	case g.Stored != w.Stored:
		return fmt.Sprintf("stored %v, reference %v", g.Stored, w.Stored)
	}
	return ""
}

func near(a, b float64) bool {
	return a == b || math.Abs(a-b) <= Tolerance*math.Max(math.Abs(a), math.Abs(b))
}

// closeDur compares retry times to Tolerance plus a nanosecond.
func closeDur(a, b time.Duration) bool {
	d := max(a-b, b-a)
	return d <= 1 || float64(d) <= Tolerance*float64(max(a, b))
}
