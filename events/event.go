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
	// Quarantine actions: an operator released (thaw) or deleted a held
	// or frozen message, expiry handled one past max_age, or the
	// automatic release sent one on (release).
	Thaw    = "thaw"
	Delete  = "delete"
	Expire  = "expire"
	Release = "release"
	// Operator actions on rates and automatic release, and a
	// configuration reload.
	Reset   = "reset"
	Suspend = "suspend"
	Resume  = "resume"
	Reload  = "reload"
)

// Actions lists every action, in the order above.
var Actions = []string{Defer, Reject, Warn, Hold, Freeze, Thaw, Delete, Expire, Release, Reset, Suspend, Resume, Reload}

// Refusals are the actions that refuse (or set aside) a message: what
// Summary counts unless the query names actions.
var Refusals = []string{Defer, Reject, Hold, Freeze}

// IsAction reports whether a is one of Actions.
func IsAction(a string) bool { return slices.Contains(Actions, a) }

// Event is one decision or action; a zero field does not apply.
type Event struct {
	// ID identifies a stored event (32 hex digits: its time and
	// sequence); set by Query, ignored by Record. Query.Before takes it.
	ID string `json:"id,omitempty"`
	// Time is when it happened (Record sets the Log's clock if zero);
	// stored to the nanosecond.
	Time time.Time `json:"time"`
	// Key is the rate key ("alice", "192.0.2.0/24"); Limit the limit's
	// name; Action one of Actions.
	Key    string `json:"key,omitempty"`
	Limit  string `json:"limit,omitempty"`
	Action string `json:"action"`
	// Rate is the measured rate and Max the limit, both in cost per the
	// limit's period (refusals and warnings).
	Rate float64 `json:"rate"`
	Max  float64 `json:"max"`
	// Sender is the envelope sender, Client the client's address,
	// QueueID the MTA's queue ID, as far as known.
	Sender  string `json:"sender,omitempty"`
	Client  string `json:"client,omitempty"`
	QueueID string `json:"queue_id,omitempty"`
	// By names who acted, for operator actions ("alice (uid 1000, pid
	// 42)", "expiry", "auto-release").
	By string `json:"by,omitempty"`
	// Detail is a short free text (a quarantine ID, what expiry did, a
	// reload's source).
	Detail string `json:"detail,omitempty"`
}

// Query selects events. The zero Query selects the DefaultMax newest.
type Query struct {
	// Since and Until bound the events' time (Since <= Time <= Until);
	// zero means no bound.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Key and Limit, if set, select events of that key or limit
	// (exactly).
	Key   string `json:"key,omitempty"`
	Limit string `json:"limit,omitempty"`
	// Actions, if not empty, selects events with one of these actions.
	Actions []string `json:"actions,omitempty"`
	// Max bounds the events Query returns, or the keys Summary returns:
	// 0 means DefaultMax, and it is at most MaxQuery.
	Max int `json:"max,omitempty"`
	// Before, an Event.ID, selects events older than that one: the next
	// page after a page that ended with it. Summary ignores it.
	Before string `json:"before,omitempty"`
}

// Bounds of Query.Max.
const (
	DefaultMax = 1000
	MaxQuery   = 100000
)

func (q Query) max() int {
	switch {
	case q.Max <= 0:
		return DefaultMax
	case q.Max > MaxQuery:
		return MaxQuery
	}
	return q.Max
}

// KeySummary is Summary's report of one key: its event count (by default
// of refusals), first and last, limits (sorted) and count per action.
type KeySummary struct {
	Key      string         `json:"key"`
	Refusals int            `json:"refusals"`
	First    time.Time      `json:"first"`
	Last     time.Time      `json:"last"`
	Limits   []string       `json:"limits"`
	Actions  map[string]int `json:"actions"`
}
