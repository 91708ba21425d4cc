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
	// Expired: past max_age, bounced or (null sender) deleted; see Detail.
	Expired  Kind = "expired"
	Released Kind = "released" // released automatically ("drip")
	// ReleaseRun: a drip run ended (Detail why); Count released,
	// Pending left, Entry the last released.
	ReleaseRun Kind = "release_run"
	RateReset  Kind = "rate_reset" // Selection.ResetRate; Entry has only Key
)

// Event is one thing that happened to one quarantined message.
type Event struct {
	Kind  Kind
	Time  time.Time
	Entry quarantine.Entry // as it was then
	// By is who acted (Unix user, "offline CLI", "expiry", "auto-release").
	By      string
	Detail  string
	Pending int  // the key's pending messages
	Alert   bool // Pending reached Options.AlertEvery's threshold
	Count   int  // ReleaseRun: messages released
}

// Events receives the Service's events concurrently, without blocking.
type Events interface {
	QuarantineEvent(ctx context.Context, ev Event)
}

// NopEvents is the default Events.
type NopEvents struct{}

// QuarantineEvent does nothing.
func (NopEvents) QuarantineEvent(context.Context, Event) {}
