package web

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// The console is a front end of the daemon's services, the same ones the
// admin socket serves; these interfaces name what it uses of them. The
// daemon passes its policy.Engine, lifecycle.Service and event log; the
// tests pass fakes.

// Rates is the rate state (policy.Engine): the store behind it may be
// the local one or Redis.
type Rates interface {
	// Lookup returns key's rate under each limit with state for it.
	Lookup(ctx context.Context, now time.Time, key string) ([]policy.KeyRate, error)
	// All returns every tracked (limit, key).
	All(ctx context.Context, now time.Time) ([]policy.KeyRate, error)
	// Reset forgets key's rate under limit ("" for every limit) and
	// returns how many states were removed.
	Reset(ctx context.Context, key, limit string) (int, error)
}

// Quarantine is the quarantine's life cycle (lifecycle.Service).
type Quarantine interface {
	List(quarantine.Filter) ([]quarantine.Entry, error)
	// Show returns the entry and its message: the stored bytes of frozen
	// mail with raw, the MTA's queue file (postcat) for held mail.
	Show(ctx context.Context, id string, raw bool) (quarantine.Entry, []byte, error)
	Thaw(ctx context.Context, sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	Delete(ctx context.Context, sel lifecycle.Selection) ([]lifecycle.Outcome, error)
	// Suspend and Resume stop and restart automatic release for a key.
	Suspend(key, by string) error
	Resume(key, by string) (bool, error)
	Health() lifecycle.Health
}

// Events is the daemon's event log (events.Log): Query returns events
// newest first, Summary the refusals per key, Record adds one without
// waiting for the disk.
type Events interface {
	Query(ctx context.Context, q events.Query) ([]events.Event, error)
	Summary(ctx context.Context, q events.Query) ([]events.KeySummary, error)
	Record(e events.Event)
}

// noEvents is Events when the event log is off: nothing recorded, nothing
// found.
type noEvents struct{}

func (noEvents) Query(context.Context, events.Query) ([]events.Event, error) { return nil, nil }
func (noEvents) Summary(context.Context, events.Query) ([]events.KeySummary, error) {
	return nil, nil
}
func (noEvents) Record(events.Event) {}

// Health is the daemon's state shown on the overview.
type Health struct {
	// Backend is "local" (memory and the BoltDB file) or "redis";
	// Degraded reports a Redis backend answering from local state, with
	// DegradedSince and the Redis error.
	Backend       string
	Degraded      bool
	DegradedSince time.Time
	StoreError    string
	// LastFlushError is the last failed write of the rate state (local
	// backend), at LastFlushErrorAt; empty when none failed.
	LastFlushError   string
	LastFlushErrorAt time.Time
	// NotifyFailed counts notifications that failed after their last
	// attempt, NotifyDropped those that did not fit the queue.
	NotifyFailed  int64
	NotifyDropped int64
	// Version and Started describe the daemon.
	Version string
	Started time.Time
}
