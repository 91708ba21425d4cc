// Package ratelimit is the pure rate arithmetic of ratelimitd: Exim's
// exponentially weighted moving average (EWMA) rate limiter, GCRA and its
// cooldown variant, and the EARRRL half-life estimator, with the strict,
// leaky, forgiving and readonly update modes.
//
// Nothing here reads the clock, sleeps, starts goroutines or does I/O: every
// function takes the current time as an argument and returns the state to
// store, so the same code serves the daemon, the simulator and the tests.
// The package imports only the standard library.
//
// Sources: the exponential algorithm, its burst and recovery properties and
// the strict/leaky modes are Exim's (Exim specification, chapter "Access
// control lists", section "Rate limiting incoming messages") as written up
// in Tony Finch's "Exponential rate limiting" and his Exim ratelimit demo
// notes; the limit/period parameters, variable cost, GCRA's
// "time += cost*period/limit" and the forgiving mode from Tony Finch's
// "GCRA: leaky buckets without the buckets" and "ratelimit
// clarifications"; the cooldown limiter from the "Simple Cooldown and Rate
// Control Algorithm" write-up; the half-life estimator (evaluate before
// update) from John Berryman's "EARRRL - the Estimated Average Recent
// Request Rate Limiter".
package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// State is what a store keeps per key: 16 bytes. Its meaning depends on the
// Algorithm that wrote it:
//
//   - Exponential: Time is the last counted update, Rate the smoothed rate in
//     cost per period at that time.
//   - GCRA and Cooldown: Time is the theoretical arrival time (the earliest
//     time the client's budget is whole again); Rate is unused (0).
//   - EARRRL: Time is the last update, Rate the decayed request count N.
//   - Baseline: Time is the last update; Rate packs two float32, the
//     exponential rate and the learned peak (see Limit.Baseline).
//
// The zero State means "no state": a key never seen, or one whose history has
// decayed away (see Limit.Negligible).
type State struct {
	// Time in Unix nanoseconds.
	Time int64
	// Rate, see above.
	Rate float64
}

// IsZero reports whether s is the zero State (no history).
func (s State) IsZero() bool { return s.Time == 0 && s.Rate == 0 }

// Algorithm selects the rate arithmetic of a Limit. The zero value is
// Exponential.
type Algorithm uint8

const (
	// Exponential is Exim's EWMA limiter (Finch, "Exponential rate
	// limiting"): the measured rate is a concrete number in cost per
	// period; the limit is also the burst size.
	Exponential Algorithm = iota
	// GCRA is the generic cell rate algorithm (ITU-T I.371; Finch, "GCRA"):
	// tat = max(tat, now) + cost*period/limit, allowed while tat-now <= period.
	GCRA
	// Cooldown is the cooldown write-up's single-score variant of GCRA:
	// the score S advances by cost*period/limit from where it was, even if
	// that is in the past, and is reset to now+cost*period/limit only when
	// the advanced score is still behind the clock; in leaky mode a
	// refusal never changes the score.
	Cooldown
	// EARRRL is the half-life estimator of the EARRRL write-up, evaluated
	// before it is updated: the decision uses the estimate without the
	// current request.
	EARRRL
	// Baseline limits a key relative to its own history: the exponential
	// rate (as Exponential) is refused above Factor times the key's
	// learned typical peak, kept between Floor and Limit (the cap). See
	// baseline.go for the arithmetic and the state it stores.
	Baseline
)

var algorithmNames = [...]string{"exponential", "gcra", "cooldown", "earrrl", "baseline"}

// String returns the configuration name of a ("exponential", "gcra",
// "cooldown", "earrrl", "baseline").
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) {
		return algorithmNames[a]
	}
	return fmt.Sprintf("algorithm(%d)", uint8(a))
}

// ParseAlgorithm maps a configuration name to an Algorithm. It returns
// ErrUnknownAlgorithm for any other name.
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if n == s {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want exponential, gcra, cooldown, earrrl or baseline)", ErrUnknownAlgorithm, s)
}

// Mode says how a Limit updates the stored state of a key (Finch,
// "Exponential rate limiting" and "ratelimit clarifications"). The zero
// value is Leaky.
type Mode uint8

const (
	// Leaky counts only admitted requests: a denied request leaves the stored
	// state unchanged. Right when a denial causes back-pressure (450 to a
	// relay that retries).
	Leaky Mode = iota
	// Strict counts every request, admitted or not, so a client that keeps
	// sending while refused stays refused. Right with freeze for MUAs.
	Strict
	// Forgiving counts a denied request but clamps the stored state to that
	// of a client sending at exactly the limit ("ratelimit
	// clarifications"): the client stays refused while it sends at or above
	// the permitted rate and is let in as soon as it slows to one request
	// of its cost per cost*Period/Limit.
	// Exponential stores time=now, rate=min(r, limit); GCRA and Cooldown
	// store an arrival time of now+Period; EARRRL stores the count whose
	// estimate has decayed to the limit cost*Period/Limit later.
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

// ParseMode maps a configuration name to a Mode. It returns ErrUnknownMode
// for any other name.
func ParseMode(s string) (Mode, error) {
	for i, n := range modeNames {
		if n == s {
			return Mode(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want leaky, strict, forgiving or readonly)", ErrUnknownMode, s)
}

// Limit is one rate limit: at most Limit cost per Period, measured with
// Algorithm and stored according to Mode. A Limit is a plain value, safe to
// copy and to use from many goroutines.
type Limit struct {
	// Limit is the permitted cost per Period, and also the burst size.
	// It must be > 0.
	Limit float64
	// Period is the averaging period (the time for 63% forgetfulness in the
	// exponential algorithm). It must be > 0.
	Period time.Duration
	// Algorithm is the rate arithmetic; zero is Exponential.
	Algorithm Algorithm
	// Mode is the update mode; zero is Leaky.
	Mode Mode
	// HalfLife is EARRRL's half-life; zero means Period*ln 2, which gives
	// the same time constant as the exponential algorithm.
	HalfLife time.Duration
	// Factor, Floor and LearnPeriod configure Baseline and are ignored by
	// the other algorithms. For Baseline, Limit is the cap: the most a
	// key is ever allowed, whatever its history.
	//
	// Factor is how many times its learned typical peak rate a key may
	// reach; zero means DefaultFactor. Floor (cost per Period, > 0,
	// <= Limit) is the least a key is allowed, so a key with no history
	// (a new user) is limited to Floor. LearnPeriod is the time constant
	// (1/e forgetfulness) of the learned peak; zero means
	// DefaultLearnPeriod; it must not be shorter than Period.
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
	case l.Algorithm == Baseline:
		return l.validateBaseline()
	}
	return nil
}

// Result is the measurement of one request against one Limit.
type Result struct {
	// Over reports that the request exceeds the limit.
	Over bool
	// Before is the stored rate decayed to now, without this request, in
	// cost per period.
	Before float64
	// Rate is the measured rate including this request, in cost per period
	// (for EARRRL, the estimate it decides on, which excludes the request).
	// It is finite for finite input: an overflow saturates at
	// math.MaxFloat64.
	Rate float64
	// RetryAfter is how long the client must pause before a request of the
	// same cost would be allowed, counted from the state that Mode stores
	// when this request is refused (Strict: Counted; Forgiving: Denied;
	// Leaky and Readonly: the previous state): with that state stored,
	// Check(state, now+RetryAfter, cost) is not Over. It is 0 when not
	// Over, and the maximum Duration when the cost alone exceeds the limit
	// (a request that can never be allowed).
	RetryAfter time.Duration
	// Counted is the state to store if this request is counted.
	Counted State
	// Denied is the state to store if the request is denied, by this limit
	// or another one of its stack; Keep is false when Mode says a denied
	// request leaves the stored state unchanged.
	Denied State
	// Keep reports whether Denied should be stored.
	Keep bool
	// Limit is the limit this request was measured against, in cost per
	// period: the Limit's Limit, except for Baseline, where it is the
	// key's learned allowance (Factor times its peak, within Floor and
	// the cap).
	Limit float64
}

// Next returns the state to store after the request measured in r, and
// whether to store it at all. admitted is the verdict of the whole stack of
// limits, not only this one: a leaky limit counts a request only if every
// limit let it through (Exim's "leaky"; stacked limits as in "ratelimit
// clarifications").
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

// deniedState is the state stored after r is refused: Next's choice, or
// prev when Next stores nothing.
func (l Limit) deniedState(prev State, r *Result) State {
	if s, ok := l.Next(*r, false); ok {
		return s
	}
	return prev
}

// Check measures a request of the given cost at time now against the stored
// state prev (the zero State for a key with no history). It does not decide
// what to store; pass the Result to Next with the stack's verdict. cost must
// be >= 0; a cost of 0 measures without adding (a read-only probe).
func (l Limit) Check(prev State, now time.Time, cost float64) Result {
	var r Result
	switch l.Algorithm {
	case GCRA, Cooldown:
		r = l.checkGCRA(prev, now.UnixNano(), cost)
	case EARRRL:
		r = l.checkEARRRL(prev, now.UnixNano(), cost)
	case Baseline:
		return l.checkBaseline(prev, now.UnixNano(), cost)
	default:
		r = l.checkExp(prev, now.UnixNano(), cost)
	}
	r.Limit = l.Limit
	return r
}

// minInterval clamps the interval (in periods) away from zero, as Exim does.
const minInterval = 1e-10

// never is the RetryAfter of a request that can never be allowed.
const never = time.Duration(math.MaxInt64)

// checkExp is the exponential algorithm of Exim (Finch, "Exponential rate
// limiting"):
//
//	interval = max((now - t_prev) / period, 1e-10)
//	alpha    = exp(-interval)
//	r_now    = (1 - alpha) * cost / interval + alpha * r_prev
//	r_now    = max(r_now, cost)
//
// 1-alpha is computed as -expm1(-interval): the naive 1-exp(-x) at
// x = 1e-10 is 8.3e-8 too large relative to x, enough to cut a 200-request
// burst at 199. RetryAfter is expWait's, not the write-up's
// t_next = now + period*ln(r_now/limit), which is only its lower bound.
func (l Limit) checkExp(prev State, now int64, cost float64) Result {
	period := float64(l.Period)
	interval := math.Inf(1)
	if prev.Time != 0 {
		interval = nsBetween(now, prev.Time) / period
	}
	interval = math.Max(interval, minInterval)
	r := expRate(prev.Rate, cost, interval)
	res := Result{Before: math.Exp(-interval) * prev.Rate, Rate: r, Counted: State{Time: now, Rate: r}}
	switch l.Mode {
	case Forgiving:
		res.Denied, res.Keep = State{Time: now, Rate: math.Min(r, l.Limit)}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	if r > l.Limit {
		res.Over = true
		res.RetryAfter = l.expWait(l.deniedState(prev, &res), now, cost)
	}
	return res
}

// expRate is r_now of Exim's algorithm for a request of the given cost after
// interval periods (already clamped) since a stored rate; it saturates at
// math.MaxFloat64 instead of overflowing.
func expRate(rate, cost, interval float64) float64 {
	r := -math.Expm1(-interval)*cost/interval + math.Exp(-interval)*rate
	return math.Min(math.Max(r, cost), math.MaxFloat64)
}

// expWait returns how long after now a request of the given cost is first
// allowed against the stored exponential state s: with w the interval in
// periods since s.Time, the least w with
//
//	f(w) = r_s*exp(-w) + cost*(1-exp(-w))/w <= limit.
//
// Seed 001's penalty time ln(r_s/limit) solves r_s*exp(-w) = limit, the
// moment the stored rate has decayed to the limit; it leaves out the
// retried request's own contribution (close to its cost), so a client that
// retried then would be refused again, and in strict mode counted again.
// The root lies between ln(r_s/limit) and ln(r_s/(limit-cost)); f is convex
// and decreasing, so Newton's method started below the root climbs to it
// without overshooting. The result is rounded up to the nanosecond and
// confirmed with Check's own arithmetic.
func (l Limit) expWait(s State, now int64, cost float64) time.Duration {
	if cost > l.Limit {
		return never
	}
	if s.Time == 0 {
		return 0 // a fresh key measures exactly cost
	}
	period := float64(l.Period)
	over := func(d time.Duration) bool {
		t := now + int64(d)
		if t < now {
			return false // beyond the end of time
		}
		return expRate(s.Rate, cost, math.Max(nsBetween(t, s.Time)/period, minInterval)) > l.Limit
	}
	if !over(0) {
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
	return settle(durationOf(w*period-elapsed), over)
}

// checkGCRA is GCRA and the cooldown variant. The
// theoretical arrival time advances by cost*period/limit per request and
// is stored rounded down to the nanosecond; the arithmetic is done relative
// to now so that Unix nanoseconds lose no precision in a float64. The
// reported rate is the budget in use, (tat-now)/period*limit.
func (l Limit) checkGCRA(prev State, now int64, cost float64) Result {
	period := float64(l.Period)
	spend := cost * period / l.Limit
	var before float64
	if prev.Time != 0 {
		before = math.Max(nsBetween(prev.Time, now), 0) / period * l.Limit
	}
	ahead := l.gcraAhead(prev, now, spend)
	res := Result{
		Before:  math.Min(before, math.MaxFloat64),
		Rate:    math.Min(ahead/period*l.Limit, math.MaxFloat64),
		Counted: State{Time: addNs(now, ahead)},
	}
	switch l.Mode {
	case Forgiving:
		res.Denied, res.Keep = State{Time: addNs(now, period)}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	if l.gcraOver(ahead) {
		res.Over = true
		res.RetryAfter = l.gcraWait(l.deniedState(prev, &res), now, spend)
	}
	return res
}

// gcraAhead returns how far (ns) ahead of now the arrival time stands after
// a request that spends spend ns against stored state s.
func (l Limit) gcraAhead(s State, now int64, spend float64) float64 {
	if s.Time == 0 {
		return spend
	}
	backlog := nsBetween(s.Time, now)
	if l.Algorithm == Cooldown {
		// Seed 003: Sn = S + T/n; reset to now + T/n when Sn < now.
		if a := backlog + spend; a >= 0 {
			return a
		}
		return spend
	}
	return math.Max(backlog, 0) + spend
}

// gcraOver reports whether an arrival time ahead ns after now is beyond the
// period (with a relative slack of 1e-12 for rounding, so a burst of
// exactly limit requests fits).
func (l Limit) gcraOver(ahead float64) bool {
	return ahead > float64(l.Period)*(1+1e-12)
}

// gcraWait returns how long after now a request spending spend ns is first
// allowed against stored state s: when the arrival time has come within
// period - spend of the clock.
func (l Limit) gcraWait(s State, now int64, spend float64) time.Duration {
	if l.gcraOver(spend) {
		return never
	}
	if s.Time == 0 {
		return 0
	}
	over := func(d time.Duration) bool {
		t := now + int64(d)
		return t >= now && l.gcraOver(l.gcraAhead(s, t, spend))
	}
	return settle(durationOf(nsBetween(s.Time, now)+spend-float64(l.Period)), over)
}

// lambda is EARRRL's decay constant in 1/ns: ln 2 / half-life.
func (l Limit) lambda() float64 {
	if l.HalfLife > 0 {
		return math.Ln2 / float64(l.HalfLife)
	}
	return 1 / float64(l.Period)
}

// checkEARRRL is the EARRRL estimator: with N the decayed count and
// lambda = ln2/half-life, the rate estimate is N*lambda*exp(-lambda*dt)
// (per unit time; reported here per period), evaluated before the update
// N = cost + N*exp(-lambda*dt). A clock that went backwards counts as no
// time passed.
func (l Limit) checkEARRRL(prev State, now int64, cost float64) Result {
	n := l.earrrlCount(prev, now)
	est := l.earrrlEstimate(n)
	res := Result{Before: est, Rate: est, Counted: State{Time: now, Rate: math.Min(cost+n, math.MaxFloat64)}}
	switch l.Mode {
	case Forgiving:
		// The count whose estimate decays to exactly the limit in
		// cost*period/limit, the spacing of a client at the limit.
		lp := l.lambda() * float64(l.Period)
		nmax := l.Limit / lp * math.Exp(lp*cost/l.Limit)
		res.Denied, res.Keep = State{Time: now, Rate: math.Min(res.Counted.Rate, nmax)}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	if est > l.Limit {
		res.Over = true
		res.RetryAfter = l.earrrlWait(l.deniedState(prev, &res), now)
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

// earrrlWait returns how long after now the estimate of stored state s
// decays to the limit: ln(estimate/limit)/lambda. The estimate excludes the
// request, so the cost plays no part.
func (l Limit) earrrlWait(s State, now int64) time.Duration {
	est := l.earrrlEstimate(l.earrrlCount(s, now))
	if !(est > l.Limit) {
		return 0
	}
	over := func(d time.Duration) bool {
		t := now + int64(d)
		return t >= now && l.earrrlEstimate(l.earrrlCount(s, t)) > l.Limit
	}
	return settle(durationOf(math.Log(est/l.Limit)/l.lambda()), over)
}

// Negligible reports whether the stored state s has decayed, by time now, to
// the point where it is equivalent to no state for any request of cost >= 1,
// so a store may drop it without forgiving anybody. For the exponential
// algorithm that holds when alpha*r_prev + (1-alpha)/interval <= 1 (then
// max(r_now, cost) = cost, exactly as for a fresh key); for GCRA when the
// arrival time has passed; for Cooldown when the score is more than a
// period old (then any cost up to the limit resets it, as for a fresh key);
// for EARRRL, whose estimate never reaches zero, when it is below a
// millionth of the limit (dropping it forgives at most that much).
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
	case Baseline:
		return l.baselineNegligible(s, n)
	default:
		interval := nsBetween(n, s.Time) / float64(l.Period)
		if interval <= 0 {
			return false
		}
		return expRate(s.Rate, 1, math.Max(interval, minInterval)) <= 1
	}
}

// Rate returns the rate of stored state s decayed to now without a new
// request, in cost per period: what `ratelimitd rate show` prints.
func (l Limit) Rate(s State, now time.Time) float64 {
	if s.IsZero() {
		return 0
	}
	r, _ := l.Usage(s, now)
	return r
}

// Usage returns the rate of stored state s decayed to now without a new
// request and the limit it is measured against, both in cost per period
// (for Baseline, the key's learned allowance): the Before and Limit of
// Check(s, now, 0), without the RetryAfter an over state would compute
// (for Baseline, a bisection of microseconds; Usage is for probing many
// keys, such as the store's eviction).
func (l Limit) Usage(s State, now time.Time) (rate, limit float64) {
	if l.Algorithm == Baseline {
		r := l.measureBaseline(s, now.UnixNano(), 0)
		return r.Before, r.Limit
	}
	r := l.Check(s, now, 0)
	return r.Before, r.Limit
}

// durationOf converts nanoseconds to a Duration, rounding up so a client that
// waits RetryAfter is allowed, and saturating instead of overflowing.
func durationOf(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return never
	}
	if !(ns > 0) {
		return 0
	}
	return time.Duration(math.Ceil(ns))
}

// settle returns d, or if over(d) a later duration for which over is false,
// found by steps that double from 1ns; never when there is none. It guards
// the float arithmetic of the wait computations: the returned wait is
// checked with the same arithmetic as Check.
func settle(d time.Duration, over func(time.Duration) bool) time.Duration {
	for step := time.Duration(1); over(d); step *= 2 {
		if step > never/2 || d > never-step {
			return never
		}
		d += step
	}
	return d
}

// nsBetween returns a-b in nanoseconds as a float64, exact while the
// difference is below 2^53 ns (104 days) and free of integer overflow.
func nsBetween(a, b int64) float64 {
	d := a - b
	if (b > 0 && d > a) || (b < 0 && d < a) {
		return float64(a) - float64(b)
	}
	return float64(d)
}

// addNs returns t+ns, rounding ns toward zero and saturating at the int64
// range.
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
