package policy

import (
	"context"

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
