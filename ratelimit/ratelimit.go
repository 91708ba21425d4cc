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
// Sources (in shared/seeds): the exponential algorithm, its burst and recovery
// properties and the strict/leaky modes from 001_90f8a24e418d2883.txt and
// 000_ca3732220ba1f8b8.txt; the limit/period parameters, variable cost, GCRA's
// "time += cost*period/limit" and the forgiving mode from
// 002_06ceeb019362f8a1.txt; the cooldown limiter from 003_21b9a04af8d9ae57.txt;
// the half-life estimator (evaluate before update) from
// 004_801e290009f212ab.txt.
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
	// Exponential is Exim's EWMA limiter (seed 001): the measured rate is a
	// concrete number in cost per period; the limit is also the burst size.
	Exponential Algorithm = iota
	// GCRA is the generic cell rate algorithm (seed 002):
	// tat = max(tat, now) + cost*period/limit, allowed while tat-now <= period.
	GCRA
	// Cooldown is seed 003's single-score variant of GCRA: a score that has
	// fallen behind the clock is reset to now+cost*period/limit rather than
	// credited, and a refusal never changes the score.
	Cooldown
	// EARRRL is the half-life estimator of seed 004, evaluated before it is
	// updated: the decision uses the estimate without the current request.
	EARRRL
)

var algorithmNames = [...]string{"exponential", "gcra", "cooldown", "earrrl"}

// String returns the configuration name of a ("exponential", "gcra",
// "cooldown", "earrrl").
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
	return 0, fmt.Errorf("%w: %q (want exponential, gcra, cooldown or earrrl)", ErrUnknownAlgorithm, s)
}

// Mode says how a Limit updates the stored state of a key (seeds 001, 002).
// The zero value is Leaky.
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
	// of a client sending at exactly the limit (seed 002): the client stays
	// refused while it sends at or above the permitted rate and is let in as
	// soon as it slows to one request of its cost per cost*Period/Limit.
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
	Rate float64
	// RetryAfter is how long the client must pause before a request of the
	// same cost would be allowed; 0 when not Over.
	RetryAfter time.Duration
	// Counted is the state to store if this request is counted.
	Counted State
	// Denied is the state to store if the request is denied, by this limit
	// or another one of its stack; Keep is false when Mode says a denied
	// request leaves the stored state unchanged.
	Denied State
	// Keep reports whether Denied should be stored.
	Keep bool
}

// Next returns the state to store after the request measured in r, and
// whether to store it at all. admitted is the verdict of the whole stack of
// limits, not only this one: a leaky limit counts a request only if every
// limit let it through (seed 001, "leaky"; DESIGN "stacked limits").
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

// Check measures a request of the given cost at time now against the stored
// state prev (the zero State for a key with no history). It does not decide
// what to store; pass the Result to Next with the stack's verdict. cost must
// be >= 0; a cost of 0 measures without adding (a read-only probe).
func (l Limit) Check(prev State, now time.Time, cost float64) Result {
	switch l.Algorithm {
	case GCRA, Cooldown:
		return l.checkGCRA(prev, now.UnixNano(), cost)
	case EARRRL:
		return l.checkEARRRL(prev, now.UnixNano(), cost)
	default:
		return l.checkExp(prev, now.UnixNano(), cost)
	}
}

// minInterval clamps the interval (in periods) away from zero (seed 001).
const minInterval = 1e-10

// checkExp is the exponential algorithm of seed 001:
//
//	interval = max((now - t_prev) / period, 1e-10)
//	alpha    = exp(-interval)
//	r_now    = (1 - alpha) * cost / interval + alpha * r_prev
//	r_now    = max(r_now, cost)
//	t_next   = now + period * ln(r_now / limit)
//
// 1-alpha is computed as -expm1(-interval): the naive 1-exp(-x) keeps only
// about 6 significant digits at x = 1e-10, enough to cut a 200-request burst
// at 199.
func (l Limit) checkExp(prev State, now int64, cost float64) Result {
	period := float64(l.Period)
	interval := math.Inf(1)
	if prev.Time != 0 {
		interval = float64(now-prev.Time) / period
	}
	interval = math.Max(interval, minInterval)
	alpha := math.Exp(-interval)
	oneMinusAlpha := -math.Expm1(-interval)
	before := alpha * prev.Rate
	r := oneMinusAlpha*cost/interval + before
	r = math.Max(r, cost)
	res := Result{Before: before, Rate: r, Counted: State{Time: now, Rate: r}}
	if r > l.Limit {
		res.Over = true
		res.RetryAfter = durationOf(period * math.Log(r/l.Limit))
	}
	switch l.Mode {
	case Forgiving:
		res.Denied, res.Keep = State{Time: now, Rate: math.Min(r, l.Limit)}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	return res
}

// checkGCRA is GCRA (seed 002) and the cooldown variant (seed 003). The
// theoretical arrival time advances by cost*period/limit per request; the
// reported rate is the budget in use, (tat-now)/period*limit.
func (l Limit) checkGCRA(prev State, now int64, cost float64) Result {
	period := float64(l.Period)
	spend := cost * period / l.Limit
	tat := prev.Time
	var before float64
	if tat > now {
		before = float64(tat-now) / period * l.Limit
	}
	var next float64
	if l.Algorithm == Cooldown {
		// Seed 003: Sn = (S == 0 ? now : S) + T/n; reset to now+T/n when Sn < now.
		base := float64(tat)
		if tat == 0 {
			base = float64(now)
		}
		next = base + spend
		if next < float64(now) {
			next = float64(now) + spend
		}
	} else {
		next = math.Max(float64(tat), float64(now)) + spend
	}
	ahead := next - float64(now)
	res := Result{Before: before, Rate: ahead / period * l.Limit, Counted: State{Time: int64(next)}}
	if ahead > period*(1+1e-12) {
		res.Over = true
		res.RetryAfter = durationOf(ahead - period)
	}
	switch {
	case l.Mode == Forgiving && l.Algorithm == GCRA:
		res.Denied, res.Keep = State{Time: now + int64(period)}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	return res
}

// lambda is EARRRL's decay constant in 1/ns: ln 2 / half-life.
func (l Limit) lambda() float64 {
	if l.HalfLife > 0 {
		return math.Ln2 / float64(l.HalfLife)
	}
	return 1 / float64(l.Period)
}

// checkEARRRL is seed 004's estimator: with N the decayed count and
// lambda = ln2/half-life, the rate estimate is N*lambda*exp(-lambda*dt)
// (per unit time; reported here per period), evaluated before the update
// N = cost + N*exp(-lambda*dt).
func (l Limit) checkEARRRL(prev State, now int64, cost float64) Result {
	lambda := l.lambda()
	period := float64(l.Period)
	decay := 0.0
	if prev.Time != 0 {
		decay = math.Exp(-lambda * float64(now-prev.Time))
	}
	n := prev.Rate * decay
	est := n * lambda * period // cost per period
	res := Result{Before: est, Rate: est, Counted: State{Time: now, Rate: cost + n}}
	if est > l.Limit {
		res.Over = true
		res.RetryAfter = durationOf(math.Log(est/l.Limit) / lambda)
	}
	switch l.Mode {
	case Forgiving:
		res.Denied, res.Keep = State{Time: now, Rate: math.Min(cost+n, l.Limit/(lambda*period))}, true
	default:
		res.Denied, res.Keep = prev, false
	}
	return res
}

// Negligible reports whether the stored state s has decayed, by time now, to
// the point where it is equivalent to no state for any request of cost >= 1,
// so a store may drop it without forgiving anybody. For the exponential
// algorithm that holds when alpha*r_prev + (1-alpha)/interval <= 1 (then
// max(r_now, cost) = cost, exactly as for a fresh key); for GCRA when the
// arrival time has passed; for EARRRL when the estimate is below a
// millionth of the limit.
func (l Limit) Negligible(s State, now time.Time) bool {
	if s.IsZero() {
		return true
	}
	n := now.UnixNano()
	switch l.Algorithm {
	case GCRA, Cooldown:
		return s.Time <= n
	case EARRRL:
		r := l.checkEARRRL(s, n, 0)
		return r.Rate < l.Limit*1e-6
	default:
		interval := float64(n-s.Time) / float64(l.Period)
		if interval <= 0 {
			return false
		}
		interval = math.Max(interval, minInterval)
		return math.Exp(-interval)*s.Rate+(-math.Expm1(-interval))/interval <= 1
	}
}

// Rate returns the rate of stored state s decayed to now without a new
// request, in cost per period: what `ratelimitd rate show` prints.
func (l Limit) Rate(s State, now time.Time) float64 {
	if s.IsZero() {
		return 0
	}
	return l.Check(s, now, 0).Before
}

// durationOf converts nanoseconds to a Duration, rounding up so a client that
// waits RetryAfter is allowed, and saturating instead of overflowing.
func durationOf(ns float64) time.Duration {
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	if ns <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(ns))
}
