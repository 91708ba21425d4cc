package ratelimit

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Converting a state to a limit's changed parameters (a reload or restart
// that changes its algorithm, period or half-life): round trips, waits,
// finiteness, non-offenders.

// convertFunc is the conversion under test.
var convertFunc = func(s State, from, to Limit, now time.Time) (State, error) {
	return to.Convert(s, from, now)
}

// reloads applies the parameters of a store's reload: a state keeps its
// bits when the meaning is unchanged (limit, mode, or a baseline's factor,
// floor and learning period alone) and is converted otherwise.
func reload(s State, from, to Limit, now time.Time) (State, bool, error) {
	if sameMeaning(from, to) {
		return s, false, nil
	}
	c, err := convertFunc(s, from, to, now)
	return c, true, err
}

func sameMeaning(a, b Limit) bool {
	ha, hb := a.HalfLife, b.HalfLife
	if a.Algorithm != EARRRL {
		ha = 0
	}
	if b.Algorithm != EARRRL {
		hb = 0
	}
	return a.Algorithm == b.Algorithm && a.Period == b.Period && ha == hb
}

var testPeriods = []time.Duration{time.Minute, 10 * time.Minute, time.Hour, 2 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour}

// randomLimit draws parameters: any algorithm and mode, a period from one
// minute to a week, a limit of 1 to 500 (sometimes fractional).
func randomLimit(rng *rand.Rand) Limit {
	l := Limit{
		Algorithm: Algorithm(rng.IntN(5)),
		Mode:      Mode(rng.IntN(4)),
		Period:    testPeriods[rng.IntN(len(testPeriods))],
		Limit:     float64(1 + rng.IntN(500)),
	}
	if rng.IntN(4) == 0 {
		l.Period = time.Duration(rng.Int64N(int64(7*24*time.Hour-time.Minute))) + time.Minute
	}
	if rng.IntN(4) == 0 {
		l.Limit = 1 + rng.Float64()*499
	}
	switch l.Algorithm {
	case EARRRL:
		if rng.IntN(2) == 0 {
			l.HalfLife = time.Duration(float64(l.Period) * (0.1 + 5*rng.Float64()))
		}
	case Baseline:
		l.Floor = 1 + rng.Float64()*(l.Limit-1)
		l.Factor = []float64{0, 2, 5}[rng.IntN(3)]
		if rng.IntN(2) == 0 {
			l.LearnPeriod = l.Period * time.Duration(1+rng.IntN(100))
		}
	}
	return l
}

// change draws the next parameters of a chain: some of period, limit,
// algorithm (with its half-life or baseline parameters) and mode change.
func change(rng *rand.Rand, l Limit) Limit {
	n := randomLimit(rng)
	if rng.IntN(3) > 0 {
		n.Period = l.Period
	}
	if rng.IntN(3) > 0 {
		n.Limit = l.Limit
		if n.Algorithm == Baseline {
			n.Floor = math.Min(n.Floor, n.Limit)
		}
	}
	if rng.IntN(3) == 0 {
		n.Algorithm, n.HalfLife, n.Factor, n.Floor, n.LearnPeriod = l.Algorithm, l.HalfLife, l.Factor, l.Floor, l.LearnPeriod
		if n.Algorithm == Baseline && n.Floor > n.Limit {
			n.Floor = n.Limit
		}
	}
	if n.Algorithm == Baseline && n.LearnPeriod > 0 && n.LearnPeriod < n.Period {
		n.LearnPeriod = n.Period
	}
	return n
}

// randomState draws a state under l at now: counted requests at random
// moments of the last few periods, or a state written directly.
func randomState(rng *rand.Rand, l Limit, now time.Time) State {
	var s State
	if rng.IntN(2) == 0 {
		c := l
		c.Mode = Strict
		n := rng.IntN(int(3*l.Limit) + 2)
		at := now.Add(-time.Duration(rng.Float64() * 3 * float64(l.Period)))
		for range n {
			s, _ = c.Next(c.Check(s, at, 1), false)
			at = at.Add(time.Duration(rng.Float64() * float64(now.Sub(at)) / 4))
		}
		return s
	}
	ago := time.Duration(rng.Float64() * 2 * float64(l.Period))
	switch l.Algorithm {
	case GCRA, Cooldown:
		return State{Time: now.Add(time.Duration((rng.Float64()*4 - 1) * float64(l.Period))).UnixNano()}
	case Baseline:
		return State{Time: now.Add(-ago).UnixNano(), Rate: PackBaseline(rng.Float64()*20*l.Limit, rng.Float64()*l.Limit)}
	default:
		return State{Time: now.Add(-ago).UnixNano(), Rate: rng.Float64() * 20 * l.Limit}
	}
}

// longestWait is the longest wait a state of l can hold at now (an
// exponential, EARRRL or baseline rate saturates; an arrival time does
// not, in practice).
func longestWait(l Limit, c State, now time.Time) time.Duration {
	n := now.UnixNano()
	switch l.Algorithm {
	case GCRA, Cooldown:
		return never
	case EARRRL:
		return l.probeWait(State{Time: n, Rate: math.MaxFloat64 / math.Max(l.lambda()*float64(l.Period), 1)}, now)
	case Baseline:
		_, peak := UnpackBaseline(c.Rate)
		return l.probeWait(State{Time: n, Rate: PackBaseline(math.MaxFloat32, peak)}, now)
	default:
		return l.probeWait(State{Time: n, Rate: math.MaxFloat64}, now)
	}
}

// relErr is |a-b| relative to the larger, 0 when both are 0.
func relErr(a, b float64) float64 {
	if a == b {
		return 0
	}
	return math.Abs(a-b) / math.Max(math.Abs(a), math.Abs(b))
}

// obsErr is the larger error of the waits and of the shares of two
// observations through the parameters ls.
func obsErr(a, b observation, ls ...Limit) float64 {
	return math.Max(waitErr(a.wait, b.wait), shareErr(a.share, b.share, nsShare(ls...)))
}

// waitErr is relErr of two waits, a nanosecond of rounding forgiven.
func waitErr(a, b time.Duration) float64 {
	if d := a - b; d >= -1 && d <= 1 {
		return 0
	}
	return relErr(float64(a), float64(b))
}

// nsShare is the share of headroom one nanosecond is worth in the
// coarsest arrival-time state among ls (0 without GCRA or Cooldown): an
// arrival time holds its lead in whole nanoseconds, so a share carried
// through it is known to that much.
func nsShare(ls ...Limit) float64 {
	var q float64
	for _, l := range ls {
		if l.Algorithm == GCRA || l.Algorithm == Cooldown {
			q = max(q, 1/l.gcraRoom())
		}
	}
	return q
}

// shareErr is relErr of two shares, two nanoseconds of an arrival time
// (nsShare) forgiven.
func shareErr(a, b, ns float64) float64 {
	if math.Abs(a-b) <= 2*ns {
		return 0
	}
	if min(a, b) == 0 && max(a, b) < 1e-6 {
		return 0 // EARRRL drops an estimate below a millionth of its limit (Negligible)
	}
	return relErr(a, b)
}

// observation is what a state says of its key at now: the wait of a
// request of cost 1, or, when not refused, the share of its headroom used.
type observation struct {
	wait  time.Duration
	share float64
}

func observe(l Limit, s State, now time.Time) observation {
	l.Mode = Leaky
	if l.Negligible(s, now) {
		return observation{} // as good as no state: nothing to keep
	}
	if w := l.probeWait(s, now); w > 0 {
		return observation{wait: w}
	}
	return observation{share: l.share(s, now)}
}

// tolerance is the relative error allowed for a round trip through to:
// 1e-9, or float32 precision where a baseline rate is stored.
func tolerance(ls ...Limit) float64 {
	for _, l := range ls {
		if l.Algorithm == Baseline {
			return 1e-6
		}
	}
	return 1e-9
}

type convertFigures struct {
	chains, undone, steps, conversions, kept, refused, saturated int
	worstErr, worstErr32                                         float64 // round trips: float64 states, baseline states
	worstGrowth, worstShrink, worstKept                          time.Duration
}

// TestConvertProperties runs random chains of parameter changes (period,
// limit, algorithm, mode) over random states, each step converting at the
// same instant as a reload does, and checks at every conversion that
//
//   - the converted state is finite and Convert reports no error;
//   - a refused key's wait never grows, is never forgiven, and is kept to
//     1e-9 unless the new state cannot hold so long a wait;
//   - a key not refused is not refused, and keeps its share of headroom;
//   - converting back returns the same wait or share (1e-9; 1e-6 through
//     a baseline's float32 rate), and converting the result there again
//     returns the converted state itself;
//
// and that the whole chain, undone step by step in reverse, returns every
// key to what its original state said.
func TestConvertProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 2))
	var f convertFigures
	chains := 1500
	if n, err := strconv.Atoi(os.Getenv("CONVERT_CHAINS")); err == nil {
		chains = n
	}
	if testing.Short() {
		chains = 200
	}
	for range chains {
		f.chains++
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour))))
		params := []Limit{randomLimit(rng)}
		states := []State{randomState(rng, params[0], now)}
		for range 1 + rng.IntN(8) {
			from, to := params[len(params)-1], change(rng, params[len(params)-1])
			if to.Validate() != nil {
				continue
			}
			s := states[len(states)-1]
			c := checkStep(t, &f, s, from, to, now)
			params, states = append(params, to), append(states, c)
		}
		// Undo the chain, step by step.
		s := states[len(states)-1]
		tol, undone := 1e-9, false
		for i := len(params) - 1; i > 0; i-- {
			var err error
			if s, _, err = reload(s, params[i], params[i-1], now); err != nil {
				t.Fatalf("undoing %v -> %v: %v", params[i], params[i-1], err)
			}
			tol = math.Max(tol, tolerance(params[i-1], params[i]))
			if saturates(params[i-1:], states[i-1:], now) {
				break
			}
			if sameMeaning(params[i-1], params[i]) && (undone || states[i-1] == states[0]) {
				// A change of limit or mode alone keeps the state's
				// bits, and the bits of a state converted there and
				// back are the conversion's, not those it was given:
				// what they say under the other limit differs.
				break
			}
			if !sameMeaning(params[i-1], params[i]) {
				undone = true
			}
			if i == 1 {
				f.undone++
			}
			want, got := observe(params[i-1], states[i-1], now), observe(params[i-1], s, now)
			if e := obsErr(got, want, params[i-1:]...); e > tol {
				t.Errorf("chain %v at %v undone to step %d: %+v, was %+v (state %+v, was %+v)", params, now, i-1, got, want, s, states[i-1])
				break
			}
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d chains (%d undone to their first state), %d steps: %d conversions (%d of refused keys, %d of them beyond the longest wait the new state holds), %d kept (limit or mode alone)",
		f.chains, f.undone, f.steps, f.conversions, f.refused, f.saturated, f.kept)
	t.Logf("worst relative round-trip error: %.3g (float64 states), %.3g (through a baseline's float32 rate)", f.worstErr, f.worstErr32)
	t.Logf("worst wait change by a conversion: +%v (growth); -%v where the new state holds the wait, -%v where it does not (the wait is then the longest it holds)",
		f.worstGrowth, f.worstKept, f.worstShrink)
}

// saturates reports whether a chain's wait met the longest one a state
// along it can hold (then undoing it cannot restore the wait).
func saturates(params []Limit, states []State, now time.Time) bool {
	for i := 1; i < len(params); i++ {
		w := observe(params[i-1], states[i-1], now).wait
		if w > 0 && !sameMeaning(params[i-1], params[i]) && w > holdable(params[i], states[i], now) {
			return true
		}
	}
	return false
}

// checkStep converts s from from to to at now, checks one step's
// properties, and returns the converted state.
func checkStep(t *testing.T, f *convertFigures, s State, from, to Limit, now time.Time) State {
	t.Helper()
	f.steps++
	c, converted, err := reload(s, from, to, now)
	name := fmt.Sprintf("%s %g/%v hl %v -> %s %g/%v hl %v, state %+v", from.Algorithm, from.Limit, from.Period, from.HalfLife,
		to.Algorithm, to.Limit, to.Period, to.HalfLife, s)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return s
	}
	if !finite(to, c) {
		t.Errorf("%s: converted to %+v, not finite", name, c)
	}
	if !converted {
		f.kept++
		return c
	}
	f.conversions++
	before, after := observe(from, s, now), observe(to, c, now)
	tol := tolerance(from, to)
	switch {
	case before.wait > 0:
		f.refused++
		longest := longestWait(to, c, now)
		if after.wait > before.wait {
			f.worstGrowth = max(f.worstGrowth, after.wait-before.wait)
			t.Errorf("%s: refused for %v, %v before the conversion (state %+v)", name, after.wait, before.wait, c)
		}
		if after.wait == 0 {
			t.Errorf("%s: refused for %v before, forgiven by the conversion (state %+v)", name, before.wait, c)
		}
		if before.wait > longest-time.Millisecond {
			f.saturated++
			f.worstShrink = max(f.worstShrink, before.wait-after.wait)
		} else if f.worstKept = max(f.worstKept, before.wait-after.wait); waitErr(after.wait, before.wait) > tol {
			t.Errorf("%s: refused for %v, %v before", name, after.wait, before.wait)
		}
	default:
		if after.wait > 0 {
			t.Errorf("%s: not refused before, refused for %v after the conversion (state %+v)", name, after.wait, c)
		}
		if e := shareErr(after.share, before.share, nsShare(from, to)); e > tol {
			t.Errorf("%s: share of headroom %.12g, %.12g before", name, after.share, before.share)
		}
	}
	// There and back.
	back, _, err := reload(c, to, from, now)
	if err != nil {
		t.Errorf("%s: back: %v", name, err)
		return c
	}
	if w := observe(from, back, now); before.wait <= holdable(to, c, now) {
		e := obsErr(w, before, from, to)
		record(f, e, from, to)
		if e > tol {
			t.Errorf("%s: there and back gives %+v, was %+v (state %+v)", name, w, before, back)
		}
	}
	// There and back thirty times (thirty reloads that change a limit and
	// change it back): the same wait or share, and finite.
	if f.conversions%10 == 0 {
		r := s
		for range 30 {
			if r, _, err = reload(r, from, to, now); err == nil {
				r, _, err = reload(r, to, from, now)
			}
			if err != nil || !finite(from, r) {
				t.Errorf("%s: thirty times there and back: %+v, %v: not finite", name, r, err)
				break
			}
		}
		if o := observe(from, r, now); before.wait <= holdable(to, c, now) && obsErr(o, before, from, to) > tol {
			t.Errorf("%s: thirty times there and back gives %+v, was %+v", name, o, before)
		}
	}
	// A converted state, there and back.
	again, _, err := reload(back, from, to, now)
	if err != nil {
		t.Errorf("%s: again: %v", name, err)
		return c
	}
	if before.wait <= holdable(to, c, now) {
		e := stateErr(to, again, c, now, 2*nsShare(from, to)*to.gcraRoom())
		if to.Algorithm == Baseline {
			// A baseline state's float32 rate and its Time (moved
			// to make the wait exact) hold the same wait in more
			// than one way: compare what they say.
			o, w := observe(to, again, now), observe(to, c, now)
			e = obsErr(o, w, from, to)
		}
		record(f, e, from, to)
		if e > tol {
			t.Errorf("%s: converted %+v, there and back %+v (relative error %.3g)", name, c, again, e)
		}
	}
	return c
}

func holdable(l Limit, c State, now time.Time) time.Duration {
	return longestWait(l, c, now) - time.Millisecond
}

func record(f *convertFigures, e float64, ls ...Limit) {
	if tolerance(ls...) > 1e-9 {
		f.worstErr32 = max(f.worstErr32, e)
	} else {
		f.worstErr = max(f.worstErr, e)
	}
}

// stateErr compares two states of l field by field: the rate (each of a
// baseline's two) relative, the time relative to its distance from now,
// slack nanoseconds (at least two: fitting a wait to the nanosecond may
// move a Time by one either way) forgiven.
func stateErr(l Limit, a, b State, now time.Time, slack float64) float64 {
	n := now.UnixNano()
	e := 0.0
	if d := math.Abs(float64(a.Time - b.Time)); d > math.Max(slack, 2) {
		e = relErr(float64(a.Time-n), float64(b.Time-n))
	}
	if l.Algorithm == Baseline {
		ra, pa := UnpackBaseline(a.Rate)
		rb, pb := UnpackBaseline(b.Rate)
		return max(e, relErr(ra, rb), relErr(pa, pb))
	}
	return max(e, relErr(a.Rate, b.Rate))
}

// The reload round trips of the report that asked for a stable conversion:
// each 1h -> 2h -> 1h round trip doubled a refused sender's wait, 30 gave
// an infinite rate; 24h -> 1h -> 24h made a 20-hour refusal 483 hours and
// cut a non-offender's 11 to 0.5; 5/1h -> 3/1m printed a rate of 1.2e22.
func TestConvertReloadRoundTrips(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	hourly, twoHourly := Limit{Limit: 10, Period: time.Hour}, Limit{Limit: 10, Period: 2 * time.Hour}
	over := State{Time: now.UnixNano(), Rate: 10 * math.Exp(0.25) * 1.1}
	w := hourly.probeWait(over, now)
	s := over
	for i := range 30 {
		var err error
		if s, err = convertFunc(s, hourly, twoHourly, now); err == nil {
			s, err = convertFunc(s, twoHourly, hourly, now)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := hourly.probeWait(s, now); got != w {
			t.Fatalf("after %d round trips 1h -> 2h -> 1h: refused for %v, %v before", i+1, got, w)
		}
	}
	if _, err := json.Marshal(s); err != nil {
		t.Fatal(err)
	}

	daily := Limit{Limit: 100, Period: 24 * time.Hour}
	hourly100 := Limit{Limit: 100, Period: time.Hour}
	refused := State{Time: now.UnixNano(), Rate: 100 * math.Exp(20.0/24) * 1.01}
	light := State{Time: now.UnixNano(), Rate: 11}
	for _, st := range []State{refused, light} {
		c, err := convertFunc(st, daily, hourly100, now)
		if err != nil {
			t.Fatal(err)
		}
		back, err := convertFunc(c, hourly100, daily, now)
		if err != nil {
			t.Fatal(err)
		}
		want, got := observe(daily, st, now), observe(daily, back, now)
		if waitErr(got.wait, want.wait) > 1e-9 || relErr(got.share, want.share) > 1e-9 {
			t.Errorf("24h -> 1h -> 24h: %+v, was %+v", got, want)
		}
		if st == light {
			if r := daily.Rate(back, now); relErr(r, 11) > 1e-9 {
				t.Errorf("24h -> 1h -> 24h: a count of 11 became %v", r)
			}
		}
	}

	five, three := Limit{Limit: 5, Period: time.Hour}, Limit{Limit: 3, Period: time.Minute}
	s = State{Time: now.Add(-10 * time.Minute).UnixNano(), Rate: 12}
	w = five.probeWait(s, now)
	c, err := convertFunc(s, five, three, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := three.probeWait(c, now); got != w || math.IsInf(c.Rate, 0) {
		t.Errorf("5/1h -> 3/1m: refused for %v (rate %v), %v before", got, c.Rate, w)
	}
}

// A state that is not finite (written by an older release) is not
// converted: Convert returns it with ErrNotFinite.
func TestConvertRefusesNotFinite(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	nan := State{Time: now.UnixNano(), Rate: math.NaN()}
	from, to := Limit{Limit: 5, Period: time.Hour}, Limit{Limit: 5, Period: 2 * time.Hour}
	if c, err := convertFunc(nan, from, to, now); err == nil || !math.IsNaN(c.Rate) {
		t.Errorf("a NaN rate converted to %+v, %v", c, err)
	}
	inf := State{Time: now.UnixNano(), Rate: math.Inf(1)}
	c, err := convertFunc(inf, from, to, now)
	if err != nil || !finite(to, c) || to.probeWait(c, now) == 0 {
		t.Errorf("an infinite rate (refused for ever) converted to %+v, %v: want the longest finite refusal", c, err)
	}
}
