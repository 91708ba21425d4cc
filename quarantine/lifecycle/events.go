package lifecycle

import (
	"context"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// Kind names what happened to a quarantined message.
type Kind string

// The kinds of Event.
const (
	Quarantined Kind = "quarantined" // held or frozen (Detail "hold" or "freeze")
	Thawed      Kind = "thawed"      // released by an operator
	Deleted     Kind = "deleted"     // deleted by an operator
	// Expired: past max_age, returned to its sender or (null sender)
	// deleted; Detail says which.
	Expired  Kind = "expired"
	Released Kind = "released" // released automatically ("drip")
	// ReleaseRun: a key's drip run ended, its backlog released (Detail
	// "") or stopped (Detail "refused again", "suspended", "auto_release
	// turned off"); Count is the messages released, Pending those left,
	// Entry the last released.
	ReleaseRun Kind = "release_run"
)

// Event is one thing that happened to one quarantined message.
type Event struct {
	Kind  Kind
	Time  time.Time
	Entry quarantine.Entry // as it was then
	// By is who acted: the operator's Unix user, "offline CLI",
	// "expiry", "auto-release"; "" for Quarantined.
	By     string
	Detail string
	// Pending is, for Quarantined, the key's pending messages; Alert says
	// it just reached an alert threshold (Options.AlertEvery).
	Pending int
	Alert   bool
	Count   int // ReleaseRun: messages released
}

// Events receives the Service's events. QuarantineEvent is called on the
// path that caused the event, possibly concurrently: it must be safe for
// concurrent use and must not block.
type Events interface {
	QuarantineEvent(ctx context.Context, ev Event)
}

// NopEvents is the default Events: it does nothing.
type NopEvents struct{}

// QuarantineEvent does nothing.
func (NopEvents) QuarantineEvent(context.Context, Event) {}
