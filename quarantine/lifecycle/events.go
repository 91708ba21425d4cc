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
	// Quarantined: a message was held or frozen (Detail "hold" or
	// "freeze").
	Quarantined Kind = "quarantined"
	// Thawed: an operator released a message (By names who).
	Thawed Kind = "thawed"
	// Deleted: an operator deleted a message (By names who).
	Deleted Kind = "deleted"
	// Expired: a message past max_age was returned to its sender or,
	// from the null sender, deleted; Detail says which ("returned to the
	// sender with a DSN", "deleted: null sender, no DSN", ...). A message
	// kept past max_age sends no event.
	Expired Kind = "expired"
	// Released: automatic release ("drip") sent a message on.
	Released Kind = "released"
	// ReleaseRun: a key's drip run ended: its backlog under the limit is
	// released (Detail ""), or the run stopped with messages left
	// (Detail "refused again", "suspended", "auto_release turned off").
	// Count is the number of messages the run released (Released events
	// before it), Pending the key's messages of that limit still held or
	// frozen; Entry is the last message released.
	ReleaseRun Kind = "release_run"
)

// Event is one thing that happened to one quarantined message.
type Event struct {
	Kind Kind
	Time time.Time
	// Entry is the entry as it was when the event happened (a copy).
	Entry quarantine.Entry
	// By is who ran it: the operator's Unix user as the admin socket saw
	// it, "offline CLI", "expiry", "auto-release"; "" for Quarantined.
	By string
	// Detail is a short free text (see the kinds).
	Detail string
	// Pending is, for Quarantined, the number of the key's messages now
	// held or frozen; Alert reports that it has just crossed an alert
	// threshold (the first message, then every quarantine.alert_every).
	Pending int
	Alert   bool
	// Count is, for ReleaseRun, the number of messages the run released.
	Count int
}

// Events receives the Service's events, e.g. to notify the postmaster.
// QuarantineEvent is called synchronously on the path that caused the
// event (a policy or milter decision, an admin request, the expiry or
// release loop) and possibly concurrently: it must be safe for
// concurrent use and must not block (queue and return; drop and count
// when full).
type Events interface {
	QuarantineEvent(ctx context.Context, ev Event)
}

// NopEvents is the default Events: it does nothing.
type NopEvents struct{}

// QuarantineEvent does nothing.
func (NopEvents) QuarantineEvent(context.Context, Event) {}
