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

// OutcomeRecorder counts outcomes and recipients; *policy.Engine is one.
type OutcomeRecorder interface {
	RecordOutcome(ctx context.Context, now time.Time, req *policy.Request, kind policy.OutcomeKind) (int, error)
	RecordRecipients(ctx context.Context, now time.Time, req *policy.Request, n int) (int, error)
}

// Result is one replayed request and the decision on it, or an outcome
// replayed (Event.Outcome set; Decision zero but for a Fault).
type Result struct {
	Event
	Decision policy.Decision
}

// Keys returns the distinct rate keys that measured the request, in limit order.
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
// result (reused); it returns fn's first error or ctx's. As the daemon
// does, an OutcomeRecorder ev counts an outcome unless its message (the
// instance) was refused, and an admitted END-OF-MESSAGE request's
// recipients once per instance.
func Replay(ctx context.Context, ev Evaluator, events iter.Seq[Event], fn func(*Result) error) error {
	var r Result
	rec, _ := ev.(OutcomeRecorder)
	refused := map[string]bool{} // instances refused
	counted := map[string]bool{} // instances whose recipients were counted
	for e := range events {
		if e.Seq%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		r = Result{Event: e}
		inst := e.Request.Instance
		switch {
		case e.Outcome == 0:
			r.Decision = ev.Evaluate(ctx, e.Time, e.Request)
			if inst != "" && r.Refused() {
				refused[inst] = true
			}
			req := e.Request
			if rec != nil && req.ProtocolState == policy.StateEndOfMessage && !r.Refused() && !refused[inst] && !counted[inst] {
				if inst != "" {
					counted[inst] = true
				}
				if _, err := rec.RecordRecipients(ctx, e.Time, req, req.RecipientCount); err != nil && r.Decision.Fault == nil {
					r.Decision.Fault = err
				}
			}
		case rec == nil || inst != "" && refused[inst]:
			continue
		default:
			_, r.Decision.Fault = rec.RecordOutcome(ctx, e.Time, e.Request, e.Outcome)
		}
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
