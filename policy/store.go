package policy

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Store keeps the rate state of every (limit, key) pair; the zero
// ratelimit.State is "no state". Safe for concurrent use.
type Store interface {
	Get(ctx context.Context, limit, key string) (ratelimit.State, error)
	// Update calls fn with the current state, holding the key
	// exclusively, and stores its result if it returns true; fn must be
	// fast and must not call the Store.
	Update(ctx context.Context, limit, key string, fn func(old ratelimit.State) (ratelimit.State, bool)) error
	Delete(ctx context.Context, limit, key string) (bool, error) // whether there was state
	// Range calls fn for every state, in no order, until it returns
	// false; fn must not call the Store.
	Range(ctx context.Context, fn func(limit, key string, s ratelimit.State) bool) error
}

// StackItem is one limit's share of one request, for a StackEvaluator.
type StackItem struct {
	Limit, Key string
	Params     ratelimit.Limit // after overrides
	Cost       float64         // in the limit's unit, >= 0
	Count      bool            // charged; false: measured only
	Refuses    bool            // the limit's Action.Refuses
}

// StackResult is the outcome for one StackItem.
type StackResult struct {
	Prev   ratelimit.State  // stored before the request
	Result ratelimit.Result // Params.Check of Prev
	Stored bool
	Err    error // this item alone failed; the others' verdicts stand
}

// StackEvaluator decides a whole stack in one atomic step (the Redis
// script): it measures every item at now, stores Params.Next(result,
// ratelimit.StackAdmits(...)) for every item with Count and fills out. An
// item failing alone gets out[i].Err; the error is returned only when
// nothing was decided. Safe for concurrent use.
type StackEvaluator interface {
	EvaluateStack(ctx context.Context, now time.Time, items []StackItem, refused bool, out []StackResult) error
}

// EvaluateStack is the reference StackEvaluator over any Store, atomic
// per key, not per stack; errors as StackEvaluator's.
func EvaluateStack(ctx context.Context, st Store, now time.Time, items []StackItem, refused bool, out []StackResult) error {
	failed := 0
	for i := range items {
		it := &items[i]
		prev, err := st.Get(ctx, it.Limit, it.Key)
		if err != nil {
			out[i] = StackResult{Err: err}
			failed++
			continue
		}
		out[i] = StackResult{Prev: prev, Result: it.Params.Check(prev, now, it.Cost)}
	}
	if failed == len(items) && failed > 0 {
		return out[0].Err
	}
	admitted := ratelimit.StackAdmits(refused, len(items), func(i int) bool {
		return out[i].Err == nil && out[i].Result.Over && items[i].Refuses
	})
	for i := range items {
		it := &items[i]
		if !it.Count || out[i].Err != nil {
			continue
		}
		next, store := it.Params.Next(out[i].Result, admitted)
		if !store {
			continue
		}
		out[i].Err = st.Update(ctx, it.Limit, it.Key, func(old ratelimit.State) (ratelimit.State, bool) {
			return it.Params.Reapply(old, out[i].Prev, next, now, it.Cost, admitted)
		})
		out[i].Stored = out[i].Err == nil
	}
	return nil
}
