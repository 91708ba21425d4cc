package ratelimit

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func baselineLimit(m Mode) Limit {
	return Limit{Limit: 500, Period: time.Hour, Algorithm: Baseline, Mode: m, Factor: 3, Floor: 2,
		LearnPeriod: 28 * 24 * time.Hour}
}

// A key with no history is held to Floor: a burst of exactly Floor fits.
func TestBaselineFloorBurst(t *testing.T) {
	for _, floor := range []float64{2, 20, 200} {
		l := baselineLimit(Leaky)
		l.Floor = floor
		if got := burst(l, 1, 0, 1000); got != int(floor) {
			t.Errorf("floor %v: burst of %d, want %v", floor, got, floor)
		}
	}
}

// The stored state packs the rate (rounded toward zero) and the peak.
func TestBaselinePack(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		r, p := rng.Float64()*1e6, rng.Float64()*1e3
		gr, gp := UnpackBaseline(PackBaseline(r, p))
		if gr > r || r-gr > r*1.2e-7 || math.Abs(gp-p) > p*6e-8 {
			t.Fatalf("pack(%v, %v) -> (%v, %v)", r, p, gr, gp)
		}
	}
	if r, p := UnpackBaseline(PackBaseline(1e300, math.Inf(1))); r != math.MaxFloat32 || p != math.MaxFloat32 {
		t.Fatalf("saturation: %v %v", r, p)
	}
}

// day sends n messages one minute apart starting at 09:00 of day d and
// returns how many were refused.
func day(k *key, d, n int) int {
	refused := 0
	start := t0.Add(time.Duration(d) * 24 * time.Hour)
	for i := range n {
		if k.send(start.Add(time.Duration(i)*time.Minute), 1).Over {
			refused++
		}
	}
	return refused
}

// A user who sends ten messages every morning is first held to the floor,
// learns a typical peak within weeks, is then never refused, and a
// compromised stream of 150 an hour is still refused within a few dozen
// messages; its refused traffic (strict mode counts it) does not teach.
func TestBaselineLearnsAndCatches(t *testing.T) {
	for _, m := range []Mode{Leaky, Strict} {
		k := &key{l: baselineLimit(m)}
		first := day(k, 0, 10)
		if first != 8 {
			t.Errorf("%v: day 0 refused %d of 10, want 8 (floor 2)", m, first)
		}
		lastRefused := 0
		for d := 1; d < 56; d++ {
			if day(k, d, 10) > 0 {
				lastRefused = d
			}
		}
		if lastRefused > 42 {
			t.Errorf("%v: still refused on day %d", m, lastRefused)
		}
		now := t0.Add(56*24*time.Hour + 8*time.Hour)
		v := k.l.Baseline(k.s, now)
		if v.Peak < 5 || v.Peak > 10 {
			t.Errorf("%v: learned peak %v, want within [5, 10]", m, v.Peak)
		}
		before := v.Peak
		// The compromise: 150 an hour for a day.
		admitted, firstRefusal := 0, -1
		for i := range 150 * 24 {
			if k.send(now.Add(time.Duration(i)*24*time.Second), 1).Over {
				if firstRefusal < 0 {
					firstRefusal = i
				}
			} else {
				admitted++
			}
		}
		if firstRefusal < 0 || firstRefusal > 3*10 {
			t.Errorf("%v: compromised stream first refused at message %d, want within 30", m, firstRefusal)
		}
		after := k.l.Baseline(k.s, now.Add(24*time.Hour))
		if after.Peak > before*1.2 {
			t.Errorf("%v: a day of refused traffic raised the peak from %v to %v", m, before, after.Peak)
		}
		t.Logf("%v: peak %.2f allowed %.1f, compromise refused from message %d, %d of 3600 admitted, peak after %.2f",
			m, v.Peak, v.Allowed, firstRefusal, admitted, after.Peak)
	}
}

// The peak is forgotten by 1/e per LearnPeriod of quiet, and the allowance
// never leaves [Floor, cap].
func TestBaselineDecayAndBounds(t *testing.T) {
	l := baselineLimit(Leaky)
	s := State{Time: t0.UnixNano(), Rate: PackBaseline(0, 100)}
	v := l.Baseline(s, t0.Add(28*24*time.Hour))
	if math.Abs(v.Peak-100/math.E) > 0.01 {
		t.Errorf("peak after one learn period %v, want %v", v.Peak, 100/math.E)
	}
	if math.Abs(v.Allowed-3*v.Peak) > 1e-4 {
		t.Errorf("allowed %v, want 3*peak", v.Allowed)
	}
	s.Rate = PackBaseline(0, 1e6)
	if v := l.Baseline(s, t0.Add(time.Hour)); v.Allowed != 500 {
		t.Errorf("allowed %v, want the cap 500", v.Allowed)
	}
	if v := l.Baseline(State{}, t0); v.Allowed != 2 || v.Peak != 0 {
		t.Errorf("fresh key %+v, want allowed = floor", v)
	}
	if !l.Negligible(State{Time: t0.UnixNano(), Rate: PackBaseline(5, 100)}, t0.Add(200*24*time.Hour)) {
		t.Error("a state quiet for 200 days is not negligible")
	}
	if l.Negligible(State{Time: t0.UnixNano(), Rate: PackBaseline(0.1, 100)}, t0.Add(2*24*time.Hour)) {
		t.Error("a learned peak of 100 is negligible after 2 days")
	}
}

// Usage is Check's Before and Limit at cost 0, for every algorithm.
func TestUsageIsCheckAtCostZero(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	limits := []Limit{baselineLimit(Leaky), {Limit: 10, Period: time.Hour},
		{Algorithm: GCRA, Limit: 10, Period: time.Hour}, {Algorithm: EARRRL, Limit: 10, Period: time.Hour}}
	for _, l := range limits {
		for range 200 {
			s := State{Time: t0.UnixNano(), Rate: PackBaseline(100*rng.Float64(), 30*rng.Float64())}
			if l.Algorithm != Baseline {
				s = State{}
				for range rng.IntN(40) {
					s = l.Check(s, t0, 1).Counted
				}
			}
			now := t0.Add(time.Duration(rng.Float64() * float64(2*time.Hour)))
			want := l.Check(s, now, 0)
			if rate, limit := l.Usage(s, now); rate != want.Before || limit != want.Limit {
				t.Fatalf("%v: Usage = %v, %v; Check = %v, %v", l.Algorithm, rate, limit, want.Before, want.Limit)
			}
		}
	}
}

// RetryAfter is honoured for Baseline in every mode.
func TestBaselineRetryAfter(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, m := range []Mode{Leaky, Strict, Forgiving, Readonly} {
		l := baselineLimit(m)
		l.Floor = 10 // above every cost: each refusal has an end
		over := 0
		for range 500 {
			s := State{Time: t0.UnixNano(), Rate: PackBaseline(100*rng.Float64(), 30*rng.Float64())}
			now := t0.Add(time.Duration(rng.Float64() * float64(10*time.Minute)))
			cost := 1 + 5*rng.Float64()
			r := l.Check(s, now, cost)
			if !r.Over {
				continue
			}
			over++
			stored := s
			if ns, ok := l.Next(r, false); ok {
				stored = ns
			}
			if r.RetryAfter == never {
				t.Fatalf("%v: never for cost %v", m, cost)
			}
			if got := l.Check(stored, now.Add(r.RetryAfter), cost); got.Over {
				t.Fatalf("%v: refused at RetryAfter %v", m, r.RetryAfter)
			}
			if r.RetryAfter > time.Microsecond {
				if got := l.Check(stored, now.Add(r.RetryAfter-time.Microsecond), cost); !got.Over {
					t.Fatalf("%v: allowed 1µs before RetryAfter %v", m, r.RetryAfter)
				}
			}
		}
		if over < 50 {
			t.Errorf("%v: only %d refusals", m, over)
		}
	}
	l := baselineLimit(Leaky)
	if r := l.Check(State{}, t0, 501); !r.Over || r.RetryAfter != never {
		t.Errorf("cost above the cap: %+v", r)
	}
}

func TestBaselineValidate(t *testing.T) {
	for _, l := range []Limit{
		{Limit: 10, Period: time.Hour, Algorithm: Baseline},
		{Limit: 10, Period: time.Hour, Algorithm: Baseline, Floor: 11},
		{Limit: 10, Period: time.Hour, Algorithm: Baseline, Floor: 1, Factor: -1},
		{Limit: 10, Period: time.Hour, Algorithm: Baseline, Floor: 1, LearnPeriod: time.Minute},
	} {
		if err := l.Validate(); !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: %v", l, err)
		}
	}
	if err := (Limit{Limit: 10, Period: time.Hour, Algorithm: Baseline, Floor: 1}).Validate(); err != nil {
		t.Error(err)
	}
	if a, err := ParseAlgorithm("baseline"); err != nil || a != Baseline || a.String() != "baseline" {
		t.Errorf("ParseAlgorithm: %v %v", a, err)
	}
}

// FuzzBaseline: finite input never yields a NaN or infinite rate, peak or
// allowance, and a refusal's RetryAfter is honoured.
func FuzzBaseline(f *testing.F) {
	f.Add(uint8(0), 500.0, 2.0, 3.0, int64(time.Hour), int64(0), t0.UnixNano(), 10.0, 5.0, t0.UnixNano()+1e9, 1.0)
	f.Add(uint8(1), 1e300, 1e-300, 1e300, int64(1), int64(1), int64(1), 1e38, 1e38, int64(math.MaxInt64), 1e300)
	f.Fuzz(func(t *testing.T, mode uint8, limit, floor, factor float64, period, learn, prevTime int64, rate, peak float64, now int64, cost float64) {
		l := Limit{Limit: limit, Period: time.Duration(period), Algorithm: Baseline, Mode: Mode(mode % 4),
			Floor: floor, Factor: factor, LearnPeriod: time.Duration(learn)}
		if l.Validate() != nil || !(rate >= 0) || !(peak >= 0) || !(cost >= 0) || math.IsInf(cost, 0) ||
			math.IsInf(rate, 0) || math.IsInf(peak, 0) {
			return
		}
		prev := State{Time: prevTime, Rate: PackBaseline(rate, peak)}
		at := time.Unix(0, now)
		r := l.Check(prev, at, cost)
		v := l.Baseline(prev, at)
		for _, x := range []float64{r.Rate, r.Before, r.Limit, v.Rate, v.Peak, v.Allowed} {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("%+v prev %+v: result %+v view %+v", l, prev, r, v)
			}
		}
		_ = l.Negligible(prev, at)
		if r.Over && r.RetryAfter < never && now+int64(r.RetryAfter) >= now {
			stored := prev
			if s, ok := l.Next(r, false); ok {
				stored = s
			}
			if got := l.Check(stored, time.Unix(0, now+int64(r.RetryAfter)), cost); got.Over {
				t.Fatalf("%+v prev %+v cost %v: refused again at RetryAfter %v", l, prev, cost, r.RetryAfter)
			}
		}
	})
}
