package simulate

import (
	"context"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Evaluator decides one request at a given time; *policy.Engine implements
// it. The simulator passes the trace's times, never the wall clock.
type Evaluator interface {
	Evaluate(ctx context.Context, now time.Time, req *policy.Request) policy.Decision
}

// Result is one replayed request and the engine's decision on it.
type Result struct {
	Event
	Decision policy.Decision
}

// Keys returns the distinct rate keys the request was measured under, in
// limit order; nil when no limit applied (exempt, unauthenticated, ...).
func (r *Result) Keys() []string {
	var keys []string
	for _, m := range r.Decision.Measures {
		if !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	return keys
}

// Refused reports whether the message did not go through as sent: the
// decision was defer, reject, hold or freeze.
func (r *Result) Refused() bool { return !r.Decision.Action.Admits() }

// Replay evaluates every event in order with ev at the event's time and
// calls fn with each result (the *Result is reused: copy what you keep). It
// stops at the first error from fn, or when ctx is done, and returns that
// error.
func Replay(ctx context.Context, ev Evaluator, events iter.Seq[Event], fn func(*Result) error) error {
	var r Result
	for e := range events {
		if e.Seq%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		r = Result{Event: e, Decision: ev.Evaluate(ctx, e.Time, e.Request)}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Filter selects results for output. The zero Filter selects everything.
type Filter struct {
	// Keys, if not empty, selects results measured under one of these
	// rate keys (compared case-insensitively).
	Keys []string
	// RefusedOnly selects only refused results (see Result.Refused).
	RefusedOnly bool
}

// Match reports whether f selects r.
func (f Filter) Match(r *Result) bool {
	if f.RefusedOnly && !r.Refused() {
		return false
	}
	if len(f.Keys) == 0 {
		return true
	}
	for _, m := range r.Decision.Measures {
		if f.Key(m.Key) {
			return true
		}
	}
	return false
}

// Key reports whether f selects the rate key k.
func (f Filter) Key(k string) bool {
	if len(f.Keys) == 0 {
		return true
	}
	for _, want := range f.Keys {
		if strings.EqualFold(want, k) {
			return true
		}
	}
	return false
}
