package events

import (
	"slices"
	"time"
)

// The actions an Event records.
const (
	// Refusals and the warning, as the policy decided them.
	Defer  = "defer"
	Reject = "reject"
	Warn   = "warn"
	Hold   = "hold"
	Freeze = "freeze"
	// Quarantine actions by an operator, expiry or automatic release.
	Thaw    = "thaw"
	Delete  = "delete"
	Expire  = "expire"
	Release = "release"
	// Operator actions and a configuration reload.
	Reset   = "reset"
	Suspend = "suspend"
	Resume  = "resume"
	Reload  = "reload"
)

// Actions lists every action, in the order above.
var Actions = []string{Defer, Reject, Warn, Hold, Freeze, Thaw, Delete, Expire, Release, Reset, Suspend, Resume, Reload}

// Refusals are the actions that refuse or hold a message (Summary's default).
var Refusals = []string{Defer, Reject, Hold, Freeze}

// IsAction reports whether a is one of Actions.
func IsAction(a string) bool { return slices.Contains(Actions, a) }

// Decisions are the actions the policy decides: coalesced, and bounded
// by Options.MaxAge and MaxCount.
var Decisions = []string{Defer, Reject, Warn, Hold, Freeze}

// class is the retention class of a record, its key's first byte.
type class byte

const (
	classDecision class = iota
	classAction
)

const numClasses = 2

// classOf returns the class of action a.
func classOf(a string) class {
	if slices.Contains(Decisions, a) {
		return classDecision
	}
	return classAction
}

// Event is one decision or action; a zero field does not apply.
type Event struct {
	// ID identifies a stored event (IDLen hex digits); set by Query.
	ID string `json:"id,omitempty"`
	// Time is when it happened (zero: the Log's clock), the first's for
	// coalesced decisions.
	Time time.Time `json:"time"`
	// Count is the decisions coalesced, Last the last one's time; Rate is
	// their highest, Sender, Client and QueueID the first's.
	Count int       `json:"count"`
	Last  time.Time `json:"last"`
	// Key is the rate key ("alice", "192.0.2.0/24"); Limit the limit's
	// name; Action one of Actions.
	Key    string `json:"key,omitempty"`
	Limit  string `json:"limit,omitempty"`
	Action string `json:"action"`
	// Rate is the measured rate and Max the limit, both in cost per the
	// limit's period (refusals and warnings).
	Rate float64 `json:"rate"`
	Max  float64 `json:"max"`
	// Envelope sender, client address and MTA queue ID, as far as known.
	Sender  string `json:"sender,omitempty"`
	Client  string `json:"client,omitempty"`
	QueueID string `json:"queue_id,omitempty"`
	// By names who acted ("alice (uid 1000, pid 42)", "expiry").
	By string `json:"by,omitempty"`
	// Detail is a short free text (a quarantine ID, a reload's source).
	Detail string `json:"detail,omitempty"`
}

// Query selects events. The zero Query selects the DefaultMax newest.
type Query struct {
	// Since and Until bound Time inclusively; zero: no bound.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Key and Limit, if set, select events of exactly that key or limit.
	Key   string `json:"key,omitempty"`
	Limit string `json:"limit,omitempty"`
	// Actions, if not empty, selects events with one of these actions.
	Actions []string `json:"actions,omitempty"`
	// Max bounds the events or Summary's keys (0: DefaultMax; <= MaxQuery).
	Max int `json:"max,omitempty"`
	// Before, an Event.ID, selects older events (the next page).
	Before string `json:"before,omitempty"`
}

// Bounds of Query.Max.
const (
	DefaultMax = 1000
	MaxQuery   = 100000
)

func (q Query) max() int {
	if q.Max <= 0 {
		return DefaultMax
	}
	return min(q.Max, MaxQuery)
}

// KeySummary is Summary's report of one key: decisions (coalesced ones
// each counted), first and last, limits (sorted), count per action.
type KeySummary struct {
	Key      string         `json:"key"`
	Refusals int            `json:"refusals"`
	First    time.Time      `json:"first"`
	Last     time.Time      `json:"last"`
	Limits   []string       `json:"limits"`
	Actions  map[string]int `json:"actions"`
}
