// Package ratelimit is the pure rate arithmetic of ratelimitd: Exim's EWMA,
// GCRA and its cooldown variant, EARRRL and a baseline of the key's own
// history, in leaky, strict, forgiving and readonly modes. Time is always
// an argument.
//
// Sources: Exim specification, "Rate limiting incoming messages"; Tony
// Finch, "Exponential rate limiting", "GCRA: leaky buckets without the
// buckets", "ratelimit clarifications"; "Simple Cooldown and Rate Control
// Algorithm"; John Berryman, "EARRRL".
package ratelimit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

var (
	ErrUnknownAlgorithm = errors.New("ratelimit: unknown algorithm")             // ParseAlgorithm, Limit.Validate
	ErrUnknownMode      = errors.New("ratelimit: unknown mode")                  // ParseMode, Limit.Validate
	ErrInvalidLimit     = errors.New("ratelimit: invalid limit")                 // Limit.Validate
	ErrAddrSetFormat    = errors.New("ratelimit: malformed recipient set")       // AddrSet.UnmarshalBinary
	ErrNotFinite        = errors.New("ratelimit: converted state is not finite") // Limit.Convert: NaN or infinity
)

// State is what a store keeps per key: Time in Unix ns, the last update
// or (GCRA, Cooldown) the theoretical arrival time; Rate in cost per
// period, EARRRL's count N, PackBaseline's pair or 0 (GCRA, Cooldown).
// The zero State is no state.
type State struct {
	Time int64
	Rate float64
}

// IsZero reports whether s is the zero State (no history).
func (s State) IsZero() bool { return s.Time == 0 && s.Rate == 0 }

// Algorithm selects the rate arithmetic of a Limit. The zero value is
// Exponential.
type Algorithm uint8

const (
	// Exponential is Exim's EWMA: a rate in cost per period; the limit is
	// also the burst size.
	Exponential Algorithm = iota
	// GCRA is the generic cell rate algorithm (ITU-T I.371):
	// tat = max(tat, now) + cost*period/limit, allowed while tat-now <= period.
	GCRA
	// Cooldown is GCRA whose tat advances from where it was, even in the
	// past, reset to now+cost*period/limit only when still behind.
	Cooldown
	// EARRRL is the half-life estimator, evaluated before the update.
	EARRRL
	// Baseline refuses the exponential rate above Factor times the key's
	// learned typical peak, kept between Floor and Limit (baseline.go).
	Baseline
)

var algorithmNames = [...]string{"exponential", "gcra", "cooldown", "earrrl", "baseline"}

// String returns the configuration name of a.
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm maps a configuration name to an Algorithm, or
// ErrUnknownAlgorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	if i := slices.Index(algorithmNames[:], s); i >= 0 {
		return Algorithm(i), nil
	}
	return 0, fmt.Errorf("%w: %q (want exponential, gcra, cooldown, earrrl or baseline)", ErrUnknownAlgorithm, s)
}

// Mode says how a Limit updates a key's stored state. The zero value is
// Leaky.
type Mode uint8

const (
	// Leaky counts only admitted requests.
	Leaky Mode = iota
	// Strict counts every request, admitted or not.
	Strict
	// Forgiving counts a denied request, clamped to the limit.
	Forgiving
	// Readonly measures and never stores.
	Readonly
)

var modeNames = [...]string{"leaky", "strict", "forgiving", "readonly"}

// String returns the configuration name of m.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// ParseMode maps a configuration name to a Mode, or ErrUnknownMode.
func ParseMode(s string) (Mode, error) {
	if i := slices.Index(modeNames[:], s); i >= 0 {
		return Mode(i), nil
	}
	return 0, fmt.Errorf("%w: %q (want leaky, strict, forgiving or readonly)", ErrUnknownMode, s)
}

// Limit is one rate limit: at most Limit cost per Period, measured with
// Algorithm, stored per Mode. A plain value, safe for concurrent use.
type Limit struct {
	Limit     float64       // cost per Period, > 0; also the burst size; Baseline: the cap
	Period    time.Duration // > 0; the 1/e time of the exponential average
	Algorithm Algorithm
	Mode      Mode
	HalfLife  time.Duration // EARRRL; 0 means Period*ln 2

	// Baseline only: Factor times the learned peak (0: DefaultFactor), at
	// least Floor (in (0, Limit]); the peak forgets by 1/e per LearnPeriod
	// (0: DefaultLearnPeriod; at least Period).
	Factor      float64
	Floor       float64
	LearnPeriod time.Duration
}

// Validate returns an error wrapping ErrInvalidLimit when l cannot be used.
func (l Limit) Validate() error {
	switch {
	case !(l.Limit > 0) || math.IsInf(l.Limit, 0):
		return fmt.Errorf("%w: limit must be a positive number, got %v", ErrInvalidLimit, l.Limit)
	case l.Period <= 0:
		return fmt.Errorf("%w: period must be positive, got %v", ErrInvalidLimit, l.Period)
	case l.HalfLife < 0:
		return fmt.Errorf("%w: half_life must not be negative, got %v", ErrInvalidLimit, l.HalfLife)
	case int(l.Algorithm) >= len(algorithmNames):
		return fmt.Errorf("%w: %v", ErrUnknownAlgorithm, l.Algorithm)
	case int(l.Mode) >= len(modeNames):
		return fmt.Errorf("%w: %v", ErrUnknownMode, l.Mode)
	case l.Algorithm != Baseline:
		return nil
	case l.Factor < 0 || math.IsInf(l.Factor, 0) || math.IsNaN(l.Factor):
		return fmt.Errorf("%w: factor must be a positive number, got %v", ErrInvalidLimit, l.Factor)
	case !(l.Floor > 0) || l.Floor > l.Limit:
		return fmt.Errorf("%w: floor must be positive and at most the cap (%v), got %v", ErrInvalidLimit, l.Limit, l.Floor)
	case l.LearnPeriod < 0 || (l.LearnPeriod > 0 && l.LearnPeriod < l.Period):
		return fmt.Errorf("%w: learn_period must be at least the period (%v), got %v", ErrInvalidLimit, l.Period, l.LearnPeriod)
	}
	return nil
}

// Result is the measurement of one request against one Limit. Rates are in
// cost per period and saturate at math.MaxFloat64.
type Result struct {
	Over   bool
	Before float64 // the stored rate decayed to now, without this request
	Rate   float64 // with this request (EARRRL: the estimate, without it)
	// RetryAfter is 0 when not Over, else the wait until a request of the
	// same cost is allowed (the maximum Duration: never).
	RetryAfter time.Duration
	Counted    State // to store if the request is counted
	Denied     State // to store if it is denied, when Keep
	Keep       bool
	Limit      float64 // measured against: Limit, or Baseline's allowance
}

// Next returns the state to store after r and whether to store it;
// admitted is the stack's verdict (StackAdmits).
func (l Limit) Next(r Result, admitted bool) (State, bool) {
	switch {
	case l.Mode == Readonly:
		return State{}, false
	case admitted || l.Mode == Strict:
		return r.Counted, true
	default:
		return r.Denied, r.Keep
	}
}

// Check measures a request of cost >= 0 (0: a probe) at now against prev.
func (l Limit) Check(prev State, now time.Time, cost float64) Result {
	n := now.UnixNano()
	r := l.measure(prev, n, cost)
	if r.Over {
		s, ok := l.Next(r, false) // the state stored after r is refused
		if !ok {
			s = prev
		}
		switch l.Algorithm {
		case GCRA, Cooldown:
			r.RetryAfter = l.gcraWait(s, n, cost*float64(l.Period)/l.Limit)
		case EARRRL:
			r.RetryAfter = l.earrrlWait(s, n)
		case Baseline:
			r.RetryAfter = l.baselineWait(s, n, cost)
		default:
			r.RetryAfter = l.expWait(s, n, cost)
		}
	}
	return r
}

// measure is Check without RetryAfter. The algorithm's check sets Denied
// to the Forgiving state; measure sets Denied and Keep by the mode.
func (l Limit) measure(prev State, now int64, cost float64) Result {
	var r Result
	switch l.Algorithm {
	case GCRA, Cooldown:
		r = l.checkGCRA(prev, now, cost)
	case EARRRL:
		r = l.checkEARRRL(prev, now, cost)
	case Baseline:
		r = l.measureBaseline(prev, now, cost)
	default:
		r = l.checkExp(prev, now, cost)
	}
	if r.Keep = l.Mode == Forgiving; !r.Keep {
		r.Denied = prev
	}
	return r
}

const (
	minInterval = 1e-10                        // the least interval in periods, as Exim clamps it
	never       = time.Duration(math.MaxInt64) // the RetryAfter of a request never allowed
)

// checkExp is Exim's algorithm:
//
//	interval = max((now - t_prev) / period, 1e-10)
//	alpha    = exp(-interval)
//	r_now    = max((1 - alpha) * cost / interval + alpha * r_prev, cost)
//
// 1-alpha is -expm1(-interval), exact near zero where 1-exp(-x) is not.
func (l Limit) checkExp(prev State, now int64, cost float64) Result {
	period := float64(l.Period)
	interval := math.Inf(1)
	if prev.Time != 0 {
		interval = nsBetween(now, prev.Time) / period
	}
	interval = math.Max(interval, minInterval)
	r := expRate(prev.Rate, cost, interval)
	return Result{Over: r > l.Limit, Before: math.Exp(-interval) * prev.Rate, Rate: r, Limit: l.Limit,
		Counted: State{Time: now, Rate: r}, Denied: State{Time: now, Rate: math.Min(r, l.Limit)}}
}

// expRate is r_now after interval periods (clamped), saturating.
func expRate(rate, cost, interval float64) float64 {
	r := -math.Expm1(-interval)*cost/interval + math.Exp(-interval)*rate
	return math.Min(math.Max(r, cost), math.MaxFloat64)
}

// expWait returns how long after now a request of cost is first allowed
// against s: the least w (periods since s.Time) with
//
//	f(w) = r_s*exp(-w) + cost*(1-exp(-w))/w <= limit
//
// by Newton's method from Finch's lower bound ln(r_s/limit).
func (l Limit) expWait(s State, now int64, cost float64) time.Duration {
	if cost > l.Limit {
		return never
	}
	if s.Time == 0 {
		return 0 // a fresh key measures exactly cost
	}
	period := float64(l.Period)
	over := func(t int64) bool {
		return expRate(s.Rate, cost, math.Max(nsBetween(t, s.Time)/period, minInterval)) > l.Limit
	}
	if !over(now) {
		return 0
	}
	elapsed := nsBetween(now, s.Time)
	w := math.Max(elapsed/period, minInterval)
	if s.Rate > l.Limit {
		w = math.Max(w, math.Log(s.Rate/l.Limit))
	}
	for range 40 {
		e := math.Exp(-w)
		g := -math.Expm1(-w) / w // (1-exp(-w))/w
		f := s.Rate*e + cost*g - l.Limit
		df := -s.Rate*e + cost*(e-g)/w
		if !(f > 0) || !(df < 0) {
			break
		}
		step := -f / df
		w += step
		if !(step > w*1e-15) {
			break
		}
	}
	return settle(now, durationOf(w*period-elapsed), over)
}

// checkGCRA is GCRA and Cooldown; the rate is (tat-now)/period*limit.
func (l Limit) checkGCRA(prev State, now int64, cost float64) Result {
	period := float64(l.Period)
	spend := cost * period / l.Limit
	var before float64
	if prev.Time != 0 {
		before = math.Max(nsBetween(prev.Time, now), 0) / period * l.Limit
	}
	ahead := l.gcraAhead(prev, now, spend)
	return Result{
		Over:    l.gcraOver(ahead),
		Before:  math.Min(before, math.MaxFloat64),
		Rate:    math.Min(ahead/period*l.Limit, math.MaxFloat64),
		Counted: State{Time: addNs(now, ahead)},
		Denied:  State{Time: addNs(now, period)},
		Limit:   l.Limit,
	}
}

// gcraAhead is how far (ns) ahead of now tat stands after spending spend
// ns against s.
func (l Limit) gcraAhead(s State, now int64, spend float64) float64 {
	if s.Time == 0 {
		return spend
	}
	backlog := nsBetween(s.Time, now)
	if l.Algorithm == Cooldown {
		if a := backlog + spend; a >= 0 {
			return a
		}
		return spend
	}
	return math.Max(backlog, 0) + spend
}

// gcraOver reports whether tat ahead ns after now is beyond the period
// (slack 1e-12: a burst of exactly limit fits).
func (l Limit) gcraOver(ahead float64) bool {
	return ahead > float64(l.Period)*(1+1e-12)
}

// gcraWait is how long after now a request spending spend ns is first
// allowed against s.
func (l Limit) gcraWait(s State, now int64, spend float64) time.Duration {
	if l.gcraOver(spend) {
		return never
	}
	if s.Time == 0 {
		return 0
	}
	over := func(t int64) bool { return l.gcraOver(l.gcraAhead(s, t, spend)) }
	return settle(now, durationOf(nsBetween(s.Time, now)+spend-float64(l.Period)), over)
}

// lambda is EARRRL's decay constant in 1/ns: ln 2 / half-life.
func (l Limit) lambda() float64 {
	if l.HalfLife > 0 {
		return math.Ln2 / float64(l.HalfLife)
	}
	return 1 / float64(l.Period)
}

// checkEARRRL is the estimate N*lambda*exp(-lambda*dt) (per period),
// before N = cost + N*exp(-lambda*dt); a clock going back is no time.
func (l Limit) checkEARRRL(prev State, now int64, cost float64) Result {
	n := l.earrrlCount(prev, now)
	est := l.earrrlEstimate(n)
	res := Result{Over: est > l.Limit, Before: est, Rate: est, Limit: l.Limit,
		Counted: State{Time: now, Rate: math.Min(cost+n, math.MaxFloat64)}}
	if l.Mode == Forgiving {
		// The count whose estimate decays to the limit in cost*period/limit.
		lp := l.lambda() * float64(l.Period)
		nmax := l.Limit / lp * math.Exp(lp*cost/l.Limit)
		res.Denied = State{Time: now, Rate: math.Min(res.Counted.Rate, nmax)}
	}
	return res
}

// earrrlCount is the stored count N of s decayed to now.
func (l Limit) earrrlCount(s State, now int64) float64 {
	if s.Time == 0 {
		return 0
	}
	return s.Rate * math.Exp(-l.lambda()*math.Max(nsBetween(now, s.Time), 0))
}

// earrrlEstimate is the rate estimate N*lambda in cost per period.
func (l Limit) earrrlEstimate(n float64) float64 {
	return math.Min(n*l.lambda()*float64(l.Period), math.MaxFloat64)
}

// earrrlWait is how long after now the estimate of s decays to the limit.
func (l Limit) earrrlWait(s State, now int64) time.Duration {
	est := l.earrrlEstimate(l.earrrlCount(s, now))
	if !(est > l.Limit) {
		return 0
	}
	over := func(t int64) bool { return l.earrrlEstimate(l.earrrlCount(s, t)) > l.Limit }
	return settle(now, durationOf(math.Log(est/l.Limit)/l.lambda()), over)
}

// Negligible reports whether s has decayed by now to the equivalent of no
// state for any request of cost >= 1 (EARRRL: below a millionth of the
// limit; Baseline: also the peak down to Floor/Factor, where a fresh key
// starts), so a store may drop it.
func (l Limit) Negligible(s State, now time.Time) bool {
	if s.IsZero() {
		return true
	}
	n := now.UnixNano()
	switch l.Algorithm {
	case GCRA:
		return s.Time <= n
	case Cooldown:
		return nsBetween(n, s.Time) > float64(l.Period)
	case EARRRL:
		return l.earrrlEstimate(l.earrrlCount(s, n)) < l.Limit*1e-6
	default:
		rate, peak := s.Rate, 0.0
		if l.Algorithm == Baseline {
			rate, peak = UnpackBaseline(s.Rate)
		}
		dt := nsBetween(n, s.Time)
		if dt <= 0 || expRate(rate, 1, math.Max(dt/float64(l.Period), minInterval)) > 1 {
			return false
		}
		return l.Algorithm != Baseline || peak*math.Exp(-dt/float64(l.learnPeriod())) <= l.Floor/l.factor()
	}
}

// Rate is the rate of s decayed to now, in cost per period.
func (l Limit) Rate(s State, now time.Time) float64 {
	r, _ := l.Usage(s, now)
	return r
}

// Usage is the Before and Limit of Check(s, now, 0) without RetryAfter.
func (l Limit) Usage(s State, now time.Time) (rate, limit float64) {
	r := l.measure(s, now.UnixNano(), 0)
	return r.Before, r.Limit
}

// durationOf converts ns to a Duration, rounding up and saturating.
func durationOf(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return never
	}
	if !(ns > 0) {
		return 0
	}
	return time.Duration(math.Ceil(ns))
}

// settle returns d, or the first later duration, by doubling steps from
// 1ns, where over(now+d) is false or now+d is beyond the end of time;
// never when there is none.
func settle(now int64, d time.Duration, over func(t int64) bool) time.Duration {
	for step := time.Duration(1); now+int64(d) >= now && over(now+int64(d)); step *= 2 {
		if step > never/2 || d > never-step {
			return never
		}
		d += step
	}
	return d
}

// nsBetween is a-b in ns as a float64, without integer overflow.
func nsBetween(a, b int64) float64 {
	d := a - b
	if (b > 0 && d > a) || (b < 0 && d < a) {
		return float64(a) - float64(b)
	}
	return float64(d)
}

// addNs is t+ns, ns rounded toward zero, saturating.
func addNs(t int64, ns float64) int64 {
	switch {
	case ns >= math.MaxInt64:
		return math.MaxInt64
	case ns <= math.MinInt64:
		return math.MinInt64
	}
	d := int64(ns)
	s := t + d
	switch {
	case d > 0 && s < t:
		return math.MaxInt64
	case d < 0 && s > t:
		return math.MinInt64
	}
	return s
}

// StackAdmits is the stack rule, the verdict each limit's Next is given:
// admitted unless refused or refusing(i) for some i in [0, n), a limit over
// whose action stops delivery. redisstore's script holds a copy.
func StackAdmits(refused bool, n int, refusing func(i int) bool) bool {
	for i := 0; i < n && !refused; i++ {
		refused = refusing(i)
	}
	return !refused
}

// Reapply returns what to store for a request measured from prev, giving
// next, when the stored state is now old: next, or if old is not prev the
// request measured again from old (no concurrent update is lost).
func (l Limit) Reapply(old, prev, next State, now time.Time, cost float64, admitted bool) (State, bool) {
	if old == prev {
		return next, true
	}
	return l.Next(l.Check(old, now, cost), admitted)
}
