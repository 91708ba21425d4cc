package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// Convert returns the state under l at now of a key whose state under from
// is s (a reload that changes a limit's algorithm, period or half-life),
// as a request of cost 1 sees it:
//
//   - a key refused for w stays refused for w, to the nanosecond;
//   - any other key keeps its share u/T of the headroom (u in use, T the
//     most usable with cost 1 still allowed).
//
// Baseline to baseline keeps the peak per unit of time; when either limit
// refuses cost 1 with no state, the rate is scaled by the limits instead.
// A non-finite result returns s and ErrNotFinite.
func (l Limit) Convert(s State, from Limit, now time.Time) (State, error) {
	from.Mode, l.Mode = Leaky, Leaky
	if r, p := UnpackBaseline(s.Rate); math.IsNaN(s.Rate) || from.Algorithm == Baseline && (math.IsNaN(r) || math.IsNaN(p)) {
		return s, fmt.Errorf("%w: %s/%v state %+v holds NaN", ErrNotFinite, from.Algorithm, from.Period, s)
	}
	if from.Negligible(s, now) {
		return State{}, nil
	}
	var peak float64
	if from.Algorithm == Baseline && l.Algorithm == Baseline {
		_, peak = UnpackBaseline(from.measureBaseline(s, now.UnixNano(), 0).Counted.Rate)
		peak = float64(float32(peak * float64(l.Period) / float64(from.Period)))
	}
	var c State
	switch w := from.probeWait(s, now); {
	case !from.admitsOne(now) || !l.admitsOne(now):
		c = l.withRate(from.Rate(s, now)*l.Limit/from.Limit, peak, now)
	case w > 0:
		c = l.withWait(w, peak, now)
	default:
		c = l.withShare(from.share(s, now), peak, now)
	}
	if l.Negligible(c, now) {
		c = State{} // as a store would drop it
	}
	if !finite(l, c) {
		return s, fmt.Errorf("%w: %s/%v state %+v -> %s/%v gives %+v", ErrNotFinite,
			from.Algorithm, from.Period, s, l.Algorithm, l.Period, c)
	}
	return c, nil
}

// finite reports whether every number s holds under l is finite.
func finite(l Limit, s State) bool {
	r, p := s.Rate, 0.0
	if l.Algorithm == Baseline {
		r, p = UnpackBaseline(s.Rate)
	}
	return !math.IsInf(r+p, 0) && !math.IsNaN(r+p)
}

// probeWait is how long l (leaky) refuses a request of cost 1 against s at
// now: 0 when allowed, the maximum Duration for never.
func (l Limit) probeWait(s State, now time.Time) time.Duration {
	l.Mode = Leaky
	if r := l.Check(s, now, 1); r.Over {
		return r.RetryAfter
	}
	return 0
}

// admitsOne reports whether l admits cost 1 with no state.
func (l Limit) admitsOne(now time.Time) bool { return l.probeWait(State{}, now) == 0 }

// costShare is what a request of cost 1 adds to an exponential rate after
// interval periods: (1-exp(-i))/i.
func costShare(interval float64) float64 {
	interval = math.Max(interval, minInterval)
	return -math.Expm1(-interval) / interval
}

// gcraRoom is how far (ns) ahead of the clock an arrival time may stand
// with a request of cost 1 still allowed.
func (l Limit) gcraRoom() float64 {
	return float64(l.Period)*(1+1e-12) - float64(l.Period)/l.Limit
}

// share is Convert's u/T of a state l does not refuse at now: 0 for no
// use, 1 at the edge of a refusal.
func (l Limit) share(s State, now time.Time) float64 {
	if s.IsZero() {
		return 0
	}
	n := now.UnixNano()
	var u, room float64
	switch l.Algorithm {
	case GCRA, Cooldown:
		u, room = math.Max(nsBetween(s.Time, n), 0), l.gcraRoom()
	case EARRRL:
		u, room = l.earrrlEstimate(l.earrrlCount(s, n)), l.Limit
	default:
		rate, lim := s.Rate, l.Limit
		dt := math.Max(nsBetween(n, s.Time), 0)
		if l.Algorithm == Baseline {
			var peak float64
			rate, peak = UnpackBaseline(s.Rate)
			lim = l.allowed(l.learn(rate, peak, dt))
		}
		interval := math.Max(dt/float64(l.Period), minInterval)
		u, room = math.Exp(-interval)*rate, lim-costShare(interval)
	}
	if !(u > 0) || !(room > 0) {
		return 0
	}
	return math.Min(u/room, 1)
}

// withShare is the state under l at now of a key using share of its
// headroom, with learned peak peak for Baseline.
func (l Limit) withShare(share, peak float64, now time.Time) State {
	n := now.UnixNano()
	var c State
	switch l.Algorithm {
	case GCRA, Cooldown:
		c = State{Time: addNs(n, math.Round(share*l.gcraRoom()))}
		if c.Time == n {
			c = State{}
		}
	case EARRRL:
		if share > 0 {
			c = State{Time: n, Rate: share * l.Limit / (l.lambda() * float64(l.Period))}
		}
	case Baseline:
		r := share * (l.allowed(peak) - costShare(0)) * math.Exp(minInterval)
		if r > 0 || peak > 0 {
			c = State{Time: n, Rate: PackBaseline(float64(float32(r)), peak)}
		}
	default:
		if share > 0 {
			c = State{Time: n, Rate: share * (l.Limit - costShare(0)) * math.Exp(minInterval)}
		}
	}
	if l.probeWait(c, now) > 0 { // rounding at the very edge
		c = l.fitWait(c, now, 0)
	}
	return c
}

// withWait is the state under l that refuses cost 1 at now for w (or the
// longest wait it can hold), with learned peak peak for Baseline.
func (l Limit) withWait(w time.Duration, peak float64, now time.Time) State {
	n := now.UnixNano()
	period := float64(l.Period)
	var c State
	switch l.Algorithm {
	case GCRA, Cooldown:
		c = State{Time: addNs(n, float64(w)+period-period/l.Limit)}
	case EARRRL:
		lp := l.lambda() * period
		est := l.Limit * math.Exp(math.Min(l.lambda()*float64(w), 1000))
		c = State{Time: n, Rate: math.Min(est/lp*(1+1e-12), math.MaxFloat64/math.Max(lp, 1))}
	case Baseline:
		x := math.Max(float64(w)/period, minInterval)
		r := math.Exp(math.Min(x, 1000)) * (l.allowed(peak) - costShare(x)) * (1 + 1e-12)
		r32 := float32(math.Min(r, math.MaxFloat32))
		if float64(r32) < r && r32 < math.MaxFloat32 {
			r32 = math.Nextafter32(r32, math.MaxFloat32)
		}
		c = State{Time: n, Rate: PackBaseline(float64(r32), peak)}
	default:
		x := math.Max(float64(w)/period, minInterval)
		r := math.Exp(math.Min(x, 1000)) * (l.Limit - costShare(x)) * (1 + 1e-12)
		c = State{Time: n, Rate: math.Min(r, math.MaxFloat64)}
	}
	if l.Algorithm != GCRA && l.Algorithm != Cooldown {
		c = l.raiseRate(c, now, w)
	}
	return l.fitWait(c, now, w)
}

// raiseRate raises the rate of s (doubling, then bisection) until l
// refuses cost 1 at now for at least w, or to the most the state holds.
func (l Limit) raiseRate(s State, now time.Time, w time.Duration) State {
	if l.probeWait(s, now) >= w {
		return s
	}
	rate, peak := s.Rate, 0.0
	most := math.MaxFloat64 / math.Max(l.lambda()*float64(l.Period), 1)
	if l.Algorithm == Baseline {
		rate, peak = UnpackBaseline(s.Rate)
		most = math.MaxFloat32
	}
	with := func(r float64) State {
		if l.Algorithm == Baseline {
			return State{Time: s.Time, Rate: PackBaseline(r, peak)}
		}
		return State{Time: s.Time, Rate: r}
	}
	lo, hi := rate, math.Max(rate, 1)
	for l.probeWait(with(hi), now) < w {
		if hi >= most {
			return with(most)
		}
		lo, hi = hi, math.Min(hi*2, most)
	}
	for range 80 {
		mid := lo + (hi-lo)/2
		if !(mid > lo && mid < hi) {
			break
		}
		if l.probeWait(with(mid), now) >= w {
			hi = mid
		} else {
			lo = mid
		}
	}
	if l.Algorithm == Baseline && float64(float32(hi)) < hi {
		hi = float64(math.Nextafter32(float32(hi), math.MaxFloat32))
	}
	return with(hi)
}

// withRate is the state under l of a key whose rate at now is x (cost per
// l.Period), with learned peak peak for Baseline.
func (l Limit) withRate(x, peak float64, now time.Time) State {
	if !(x > 0) && !(peak > 0) {
		return State{}
	}
	x = math.Min(math.Max(x, 0), math.MaxFloat64)
	n := now.UnixNano()
	switch l.Algorithm {
	case GCRA, Cooldown:
		return State{Time: addNs(n, x/l.Limit*float64(l.Period))}
	case EARRRL:
		return State{Time: n, Rate: x / (l.lambda() * float64(l.Period))}
	case Baseline:
		return State{Time: n, Rate: PackBaseline(x, peak)}
	default:
		return State{Time: n, Rate: x}
	}
}

// fitWait moves s.Time by whole nanoseconds (bisection) so that l refuses
// cost 1 at now for w, or the longest wait below; a last-update stamp is
// only moved earlier.
func (l Limit) fitWait(s State, now time.Time, w time.Duration) State {
	at := func(k int64) State { return State{Time: addNs(s.Time, float64(k)), Rate: s.Rate} }
	wait := func(k int64) time.Duration { return l.probeWait(at(k), now) }
	w0 := wait(0)
	if w0 == w {
		return s
	}
	stamped := l.Algorithm != GCRA && l.Algorithm != Cooldown
	var lo, hi int64 // wait(lo) <= w < wait(hi)
	if w0 > w {
		lo = -int64(w0 - w)
		if wait(lo) == w {
			return at(lo)
		}
		for wait(lo) > w {
			if hi = lo; lo < math.MinInt64/4 {
				return State{}
			}
			lo *= 2
		}
	} else {
		if stamped {
			return s // the longest wait s's state can hold
		}
		for hi = int64(w - w0); wait(hi) <= w; hi *= 2 {
			if lo = hi; hi > math.MaxInt64/4 {
				return at(hi)
			}
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if wait(mid) <= w {
			lo = mid
		} else {
			hi = mid
		}
	}
	return at(lo)
}
