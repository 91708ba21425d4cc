package simulate

import (
	"context"
	"iter"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Evaluator decides one request at the trace's time; *policy.Engine is one.
type Evaluator interface {
	Evaluate(ctx context.Context, now time.Time, req *policy.Request) policy.Decision
}

// Result is one replayed request and the engine's decision on it.
type Result struct {
	Event
	Decision policy.Decision
}

// Keys returns the distinct rate keys that measured the request, in limit
// order; nil when none did.
func (r *Result) Keys() []string {
	var keys []string
	for _, m := range r.Decision.Measures {
		if !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	return keys
}

// Refused reports a defer, reject, hold or freeze.
func (r *Result) Refused() bool { return !r.Decision.Action.Admits() }

// Replay evaluates every event with ev at its time and calls fn with each
// result (reused: copy what you keep); it returns fn's first error or ctx's.
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

// Filter selects results: measured under one of Keys (case-insensitive;
// empty: any), refused if RefusedOnly. The zero Filter selects everything.
type Filter struct {
	Keys        []string
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
	return len(f.Keys) == 0 || slices.ContainsFunc(f.Keys, func(w string) bool { return strings.EqualFold(w, k) })
}
