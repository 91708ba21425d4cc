package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// Baseline: a limit relative to the key's own history.
//
// A user who sends five messages a day and suddenly sends 150 an hour is
// compromised long before a fixed 200/hour limit notices. Baseline measures
// the same exponential rate r as Exponential (Exim's EWMA, cost per Period)
// and learns each key's typical peak P, a decayed high percentile of r
// over LearnPeriod. A request is over when
//
//	r > allowed = min(Limit, max(Floor, Factor*P))
//
// so a key with no history is held to Floor and no key ever gets more than
// Limit (the cap).
//
// The peak P tracks the BaselineQuantile (0.99) time-weighted quantile of
// r with exponential forgetting: between two updates dt apart, with a the
// time r spent above P but not above the teaching bound
// B = min(allowance, sqrt(Factor)*P) (r decays as r_prev*exp(-t/Period),
// so the time above x is Period*ln(r_prev/x) clipped to [0, dt]),
//
//	ln P += (a/(1-q) - dt) / LearnPeriod
//
// P falls by 1/e per LearnPeriod of quiet and rises while r is above it;
// it is stationary when r is above P for a fraction 1-q of the time. P
// stays 0 (nothing learned) until r first passes Floor/Factor, grows from
// there (below it, P only decays), and never
// rises above B. Time spent above B (a key held at its allowance by a
// leaky limit, or refused and counted in strict mode) teaches nothing, so
// an attacker cannot raise its own allowance by being refused; one that
// paces itself between P and B raises P by at most a factor
// exp(q/(1-q) * Period/LearnPeriod) per Period (with a 1h period and a
// 28-day LearnPeriod, 16% an hour) and never above B, and never the
// allowance above the cap.
//
// The stored State is 16 bytes like every other algorithm's: Time is the
// last update (Unix ns) and Rate holds r and P as two float32 (r in the
// high 32 bits, rounded toward zero so that a burst of exactly the
// allowance fits; P in the low 32 bits). float32 keeps 7 significant
// digits, far below the precision of a rate limit, and the stores, the
// journal and the admin API carry the 64 bits unchanged.

// Defaults of the Baseline parameters.
const (
	// DefaultFactor is Limit.Factor when zero.
	DefaultFactor = 3
	// DefaultLearnPeriod is Limit.LearnPeriod when zero: four weeks.
	DefaultLearnPeriod = 28 * 24 * time.Hour
	// BaselineQuantile is the time-weighted quantile of the rate that
	// Baseline learns as a key's typical peak.
	BaselineQuantile = 0.99
)

func (l Limit) factor() float64 {
	if l.Factor > 0 {
		return l.Factor
	}
	return DefaultFactor
}

func (l Limit) learnPeriod() time.Duration {
	if l.LearnPeriod > 0 {
		return l.LearnPeriod
	}
	return DefaultLearnPeriod
}

func (l Limit) validateBaseline() error {
	switch {
	case l.Factor < 0 || math.IsInf(l.Factor, 0) || math.IsNaN(l.Factor):
		return fmt.Errorf("%w: factor must be a positive number, got %v", ErrInvalidLimit, l.Factor)
	case !(l.Floor > 0) || l.Floor > l.Limit:
		return fmt.Errorf("%w: floor must be positive and at most the cap (%v), got %v", ErrInvalidLimit, l.Limit, l.Floor)
	case l.LearnPeriod < 0 || (l.LearnPeriod > 0 && l.LearnPeriod < l.Period):
		return fmt.Errorf("%w: learn_period must be at least the period (%v), got %v", ErrInvalidLimit, l.Period, l.LearnPeriod)
	}
	return nil
}

// PackBaseline returns the State.Rate of a Baseline state whose
// exponential rate is rate and learned peak is peak (both in cost per
// Period): rate rounded toward zero to a float32 in the high 32 bits, peak
// as a float32 in the low 32 bits (see the layout above). Values beyond
// the float32 range are clipped to math.MaxFloat32.
func PackBaseline(rate, peak float64) float64 {
	r := float32(math.Min(rate, math.MaxFloat32))
	if float64(r) > rate {
		r = math.Nextafter32(r, 0)
	}
	p := float32(math.Min(peak, math.MaxFloat32))
	return math.Float64frombits(uint64(math.Float32bits(r))<<32 | uint64(math.Float32bits(p)))
}

// UnpackBaseline is the inverse of PackBaseline: the rate and learned peak
// (cost per Period) held in the State.Rate v of a Baseline state, as last
// stored (not decayed to any time; see Limit.Baseline for that).
func UnpackBaseline(v float64) (rate, peak float64) {
	b := math.Float64bits(v)
	return float64(math.Float32frombits(uint32(b >> 32))), float64(math.Float32frombits(uint32(b)))
}

// allowed is the allowance of a key whose learned peak is peak.
func (l Limit) allowed(peak float64) float64 {
	return math.Min(l.Limit, math.Max(l.Floor, l.factor()*peak))
}

// learn returns the peak learned from stored rate and peak after dt ns in
// which the rate decayed from rate (see the package comment above).
func (l Limit) learn(rate, peak, dt float64) float64 {
	if !(dt > 0) {
		return peak
	}
	base := math.Max(peak, l.Floor/l.factor())
	// Only rates up to sqrt(Factor) times the peak teach: a key held at
	// its allowance (a leaky limit refusing it) teaches nothing.
	lim := math.Min(l.allowed(base), base*math.Sqrt(l.factor()))
	period := float64(l.Period)
	above := func(x float64) float64 {
		if !(rate > x) {
			return 0
		}
		return math.Min(dt, period*math.Log(rate/x))
	}
	a := above(base) - above(lim)
	if a <= 0 && peak < base {
		// Nothing learned yet (below where a fresh key starts): decay.
		return peak * math.Exp(-dt/float64(l.learnPeriod()))
	}
	p := base * math.Exp((a/(1-BaselineQuantile)-dt)/float64(l.learnPeriod()))
	return math.Min(p, math.Max(base, math.Min(rate, lim)))
}

// checkBaseline is Check for Baseline: the exponential rate of checkExp
// against the allowance learned up to now.
func (l Limit) checkBaseline(prev State, now int64, cost float64) Result {
	res := l.measureBaseline(prev, now, cost)
	if res.Over {
		res.RetryAfter = l.baselineWait(l.deniedState(prev, &res), now, cost)
	}
	return res
}

// measureBaseline is checkBaseline without RetryAfter.
func (l Limit) measureBaseline(prev State, now int64, cost float64) Result {
	rate, peak := UnpackBaseline(prev.Rate)
	interval := math.Inf(1)
	if prev.Time != 0 {
		dt := math.Max(nsBetween(now, prev.Time), 0)
		peak = l.learn(rate, peak, dt)
		interval = dt / float64(l.Period)
	}
	lim := l.allowed(peak)
	interval = math.Max(interval, minInterval)
	r := expRate(rate, cost, interval)
	res := Result{Before: math.Exp(-interval) * rate, Rate: r, Limit: lim,
		Counted: State{Time: now, Rate: PackBaseline(r, peak)}}
	switch l.Mode {
	case Forgiving:
		res.Denied, res.Keep = State{Time: now, Rate: PackBaseline(math.Min(r, lim), peak)}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	res.Over = r > lim
	return res
}

// baselineWait is expWait against the allowance at now, confirmed (and
// moved later if the allowance shrank meanwhile) with checkBaseline.
func (l Limit) baselineWait(s State, now int64, cost float64) time.Duration {
	if cost > l.Limit {
		return never
	}
	if s.Time == 0 && cost <= l.Floor {
		return 0
	}
	rate, peak := UnpackBaseline(s.Rate)
	e := l
	e.Algorithm = Exponential
	e.Limit = l.allowed(l.learn(rate, peak, math.Max(nsBetween(now, s.Time), 0)))
	d := time.Duration(0)
	if cost <= e.Limit {
		d = e.expWait(State{Time: s.Time, Rate: rate}, now, cost)
	}
	over := func(d time.Duration) bool {
		t := now + int64(d)
		return t >= now && l.measureBaseline(s, t, cost).Over
	}
	// The peak learned (or forgotten) during the wait moves the
	// allowance: bracket the first allowed instant, then bisect.
	lo, hi := time.Duration(0), d
	if over(d) {
		lo = d
		for step := max(d/64, 1); ; step *= 2 {
			if step > never/2 || hi > never-step {
				return never
			}
			hi += step
			if !over(hi) {
				break
			}
			lo = hi
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if over(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// baselineNegligible reports whether s is equivalent to no state at now:
// its rate is negligible as an exponential rate's and its peak has decayed
// to at most Floor/Factor, where a fresh key starts.
func (l Limit) baselineNegligible(s State, now int64) bool {
	rate, peak := UnpackBaseline(s.Rate)
	dt := nsBetween(now, s.Time)
	if dt <= 0 {
		return false
	}
	interval := math.Max(dt/float64(l.Period), minInterval)
	if expRate(rate, 1, interval) > 1 {
		return false
	}
	return peak*math.Exp(-dt/float64(l.learnPeriod())) <= l.Floor/l.factor()
}

// BaselineView is what a Baseline state says about its key at some time.
type BaselineView struct {
	// Rate is the key's exponential rate decayed to that time, in cost
	// per Period.
	Rate float64
	// Peak is the learned typical peak rate, in cost per Period (0 for a
	// key with no history).
	Peak float64
	// Allowed is the rate the key may reach: min(Limit, max(Floor,
	// Factor*Peak)), in cost per Period.
	Allowed float64
}

// Baseline returns the rate, learned peak and allowance of the Baseline
// state s at time now, without a new request (what `ratelimitd rate show`
// prints, and what a tool that proposes limits reads). For a limit of
// another algorithm it returns the zero BaselineView.
func (l Limit) Baseline(s State, now time.Time) BaselineView {
	if l.Algorithm != Baseline {
		return BaselineView{}
	}
	if s.IsZero() {
		return BaselineView{Allowed: l.allowed(0)}
	}
	r := l.measureBaseline(s, now.UnixNano(), 0)
	_, peak := UnpackBaseline(r.Counted.Rate)
	return BaselineView{Rate: r.Before, Peak: peak, Allowed: r.Limit}
}
