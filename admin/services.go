package admin

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// The daemon's services as this API and the web console use them; safe
// for concurrent use.

// Rates is the rate state: *policy.Engine.
type Rates interface {
	// Lookup returns key's rate under each limit with state for it, All
	// every tracked (limit, key).
	Lookup(ctx context.Context, now time.Time, key string) ([]policy.KeyRate, error)
	All(ctx context.Context, now time.Time) ([]policy.KeyRate, error)
	// Reset forgets key's rate under limit ("": all) and returns how many
	// states it removed; policy.ErrUnknownLimit.
	Reset(ctx context.Context, key, limit string) (int, error)
}

// Quarantine is the quarantine's life cycle: *lifecycle.Service.
type Quarantine interface {
	List(quarantine.Filter) ([]quarantine.Entry, error)
	// Show returns the entry and its message (raw: stored bytes, held mail:
	// postcat); quarantine.ErrNotFound.
	Show(ctx context.Context, id string, raw bool) (quarantine.Entry, []byte, error)
	Thaw(ctx context.Context, sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	Delete(ctx context.Context, sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	// Suspend stops (resume: restarts) automatic release for a key and
	// reports whether it was suspended.
	Suspend(key, by string, resume bool) (bool, error)
	Health() lifecycle.Health
}

// Events is the event log: *events.Log. Record never blocks.
type Events interface {
	Query(ctx context.Context, q events.Query) ([]events.Event, error)
	Summary(ctx context.Context, q events.Query) ([]events.KeySummary, error)
	Record(e events.Event)
}
