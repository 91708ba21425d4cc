package policy

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Store keeps the rate state of every (limit, key) pair. The engine reads
// with Get, decides, then writes with Update, which re-applies the request to
// whatever state is current so concurrent requests for one key are never
// lost. Implementations must be safe for concurrent use. The zero
// ratelimit.State stands for "no state".
type Store interface {
	// Get returns the stored state of key under limit, or the zero State.
	Get(ctx context.Context, limit, key string) (ratelimit.State, error)
	// Update calls fn with the current state of key under limit (zero if
	// none) while holding that key exclusively, and stores fn's result when
	// fn returns true. fn must be fast and must not call the Store.
	Update(ctx context.Context, limit, key string, fn func(old ratelimit.State) (ratelimit.State, bool)) error
	// Delete forgets key under limit; it reports whether there was state.
	Delete(ctx context.Context, limit, key string) (bool, error)
	// Range calls fn for every stored state, in no particular order, until
	// fn returns false. fn must not call the Store.
	Range(ctx context.Context, fn func(limit, key string, s ratelimit.State) bool) error
}

// StackItem is one limit's share of one request, as handed to a
// StackEvaluator: the (limit, key) pair, its parameters after per-key
// overrides, the cost in the limit's unit (mails, recipients or bytes), and
// how the stack's verdict applies to it.
type StackItem struct {
	// Limit is the limit's name (the store's namespace) and Key the rate
	// key value.
	Limit, Key string
	// Params are the limit's arithmetic: limit (cost per period, also the
	// burst), period, algorithm and mode, after overrides.
	Params ratelimit.Limit
	// Cost is the request's cost in the limit's unit; >= 0.
	Cost float64
	// Count reports whether the cost is charged (stored according to the
	// mode and the verdict). False is a read-only probe: measured, never
	// stored.
	Count bool
	// Refuses reports whether this limit's action, when it is over, keeps
	// the message from delivery (hold, freeze, defer, reject; not warn).
	// If any over item refuses, the stack did not admit the request and
	// leaky limits are not charged (Exim specification, chapter "Rate
	// limiting": leaky mode).
	Refuses bool
}

// StackResult is the outcome for one StackItem.
type StackResult struct {
	// Prev is the stored state before the request (zero if none).
	Prev ratelimit.State
	// Result is the measurement (ratelimit.Limit.Check of Prev).
	Result ratelimit.Result
	// Stored reports whether the item's new state was stored.
	Stored bool
	// Err is set when this item alone could not be measured or stored
	// (for example ErrKeyTooLong or a full store); its Result is then
	// not used, and the other items' verdicts stand.
	Err error
}

// StackEvaluator is implemented by stores that decide a whole stack of
// limits in one atomic step (the Redis store: one server-side script per
// request, on the server's clock). EvaluateStack measures every item at
// time now (a store with its own clock may use that instead), computes
//
//	admitted = !refused && no item is both Over and Refuses
//
// (the stack rule, ratelimit.StackAdmits; refused: an earlier request of
// the same message was already refused, so leaky limits are not
// charged), stores Params.Next(result, admitted)
// for every item with Count, and writes out[i] for items[i]; len(out) must
// be len(items). An item that fails alone gets out[i].Err. It returns an
// error only when it could decide nothing (the engine then fails open).
// Implementations must be safe for concurrent use.
type StackEvaluator interface {
	EvaluateStack(ctx context.Context, now time.Time, items []StackItem, refused bool, out []StackResult) error
}

// EvaluateStack is the reference StackEvaluator over any Store: Get every
// item, decide, then Update each counted item, re-applying the request on
// top of a state that changed since Get so concurrent requests are never
// lost. It is atomic per key, not per stack: two concurrent requests of one
// key can both see room for one more. An item whose Get or Update fails
// gets out[i].Err and takes no part in the verdict. Every store must give
// the same results as this function for a sequential history (the store
// conformance tests hold the Redis store to it). It returns an error only
// when every item failed.
func EvaluateStack(ctx context.Context, st Store, now time.Time, items []StackItem, refused bool, out []StackResult) error {
	return evaluateStack(ctx, st, now, items, refused, out, new(stackUpdate))
}

// stackUpdate is the Store.Update function of one item of EvaluateStack:
// the new state next if the stored state is still prev, else the request
// re-applied to the stored state. fn is bound once (a reused stackUpdate
// costs no allocation per Update).
type stackUpdate struct {
	rl         ratelimit.Limit
	prev, next ratelimit.State
	now        time.Time
	cost       float64
	admitted   bool
	fn         func(ratelimit.State) (ratelimit.State, bool)
}

func (u *stackUpdate) apply(old ratelimit.State) (ratelimit.State, bool) {
	return u.rl.Reapply(old, u.prev, u.next, u.now, u.cost, u.admitted)
}

// evaluateStack is EvaluateStack with the caller's stackUpdate.
func evaluateStack(ctx context.Context, st Store, now time.Time, items []StackItem, refused bool, out []StackResult, u *stackUpdate) error {
	if u.fn == nil {
		u.fn = u.apply
	}
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
		u.rl, u.prev, u.next, u.now, u.cost, u.admitted = it.Params, out[i].Prev, next, now, it.Cost, admitted
		err := st.Update(ctx, it.Limit, it.Key, u.fn)
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Stored = true
	}
	return nil
}
