package ratelimit

import (
	"cmp"
	"math"
	"time"
)

// Baseline: a limit relative to the key's own history. It measures the
// exponential rate r and learns the key's typical peak P, the
// BaselineQuantile time-weighted quantile of r with exponential
// forgetting. A request is over when
//
//	r > allowed = min(Limit, max(Floor, Factor*P))
//
// Between two updates dt apart, with a the time r spent above P but not
// above B = min(allowed, sqrt(Factor)*P),
//
//	ln P += (a/(1-q) - dt) / LearnPeriod
//
// P stays 0 until r first passes Floor/Factor and never rises above B, so
// being refused teaches nothing. State.Rate packs r and P (PackBaseline).

const (
	DefaultFactor      = 3                   // Limit.Factor when zero
	DefaultLearnPeriod = 28 * 24 * time.Hour // Limit.LearnPeriod when zero
	BaselineQuantile   = 0.99                // the quantile learned as the peak
)

func (l Limit) factor() float64 {
	if l.Factor > 0 {
		return l.Factor
	}
	return DefaultFactor
}

func (l Limit) learnPeriod() time.Duration { return cmp.Or(max(l.LearnPeriod, 0), DefaultLearnPeriod) }

// PackBaseline returns the State.Rate of a Baseline state: rate rounded
// toward zero to a float32 in the high 32 bits, peak as a float32 in the
// low ones, both clipped to math.MaxFloat32.
func PackBaseline(rate, peak float64) float64 {
	r := float32(math.Min(rate, math.MaxFloat32))
	if float64(r) > rate {
		r = math.Nextafter32(r, 0)
	}
	p := float32(math.Min(peak, math.MaxFloat32))
	return math.Float64frombits(uint64(math.Float32bits(r))<<32 | uint64(math.Float32bits(p)))
}

// UnpackBaseline is the inverse of PackBaseline (as stored, not decayed).
func UnpackBaseline(v float64) (rate, peak float64) {
	b := math.Float64bits(v)
	return float64(math.Float32frombits(uint32(b >> 32))), float64(math.Float32frombits(uint32(b)))
}

// allowed is the allowance of a key whose learned peak is peak.
func (l Limit) allowed(peak float64) float64 {
	return math.Min(l.Limit, math.Max(l.Floor, l.factor()*peak))
}

// learn returns the peak learned in dt ns while the rate decayed from rate.
func (l Limit) learn(rate, peak, dt float64) float64 {
	if !(dt > 0) {
		return peak
	}
	base := math.Max(peak, l.Floor/l.factor())
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
		return peak * math.Exp(-dt/float64(l.learnPeriod()))
	}
	p := base * math.Exp((a/(1-BaselineQuantile)-dt)/float64(l.learnPeriod()))
	return math.Min(p, math.Max(base, math.Min(rate, lim)))
}

// measureBaseline is measure for Baseline.
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
	return Result{Over: r > lim, Before: math.Exp(-interval) * rate, Rate: r, Limit: lim,
		Counted: State{Time: now, Rate: PackBaseline(r, peak)},
		Denied:  State{Time: now, Rate: PackBaseline(math.Min(r, lim), peak)}}
}

// baselineWait is expWait against the allowance at now, bisected to where
// the allowance learned meanwhile admits the request.
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

// BaselineView is a Baseline state's key at some time, in cost per Period.
type BaselineView struct {
	Rate    float64 // decayed to that time
	Peak    float64 // learned typical peak; 0 without history
	Allowed float64 // min(Limit, max(Floor, Factor*Peak))
}

// Baseline returns the view of the Baseline state s at now, without a new
// request; the zero BaselineView for another algorithm.
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
