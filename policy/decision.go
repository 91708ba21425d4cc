package policy

import (
	"fmt"
	"time"
)

// Action is what the MTA is told when a limit is over; the zero value is
// Pass. Actions are not ranked: the first limit of the stack that answers
// (Answers) decides (docs/limits.md, "Escalation").
type Action uint8

const (
	Pass   Action = iota // DUNNO; milter continue
	Warn                 // let through, logged, optional header
	Hold                 // the MTA's hold queue, recorded in the quarantine
	Freeze               // stored in the quarantine, the MTA's copy discarded (milter)
	Defer                // 450 4.7.1
	Reject               // 550 5.7.1
)

var actionNames = [...]string{"pass", "warn", "hold", "freeze", "defer", "reject"}

// String returns the configuration name of a.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction maps a configuration name to an Action, or ErrUnknownAction.
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want pass, warn, hold, freeze, defer or reject)", ErrUnknownAction, s)
}

// Admits reports whether a lets the message on to delivery now (Pass,
// Warn).
func (a Action) Admits() bool { return a <= Warn }

// Answers reports whether a limit over with action a decides the stack's
// answer (Hold, Freeze, Defer, Reject); Pass and Warn are measure-only and
// dry runs, so the ladder goes on past them.
func (a Action) Answers() bool { return a > Warn }

// Refuses reports whether the MTA refuses the message (Defer, Reject), so
// the sender must try it again; a held or frozen message is accepted and
// kept, and counts as admitted for leaky limits.
func (a Action) Refuses() bool { return a == Defer || a == Reject }

// Ahead reports whether d decides a message ahead of o, two decisions on
// requests of one message (a milter's RCPTs and END-OF-MESSAGE): when both
// answer (Action.Answers) and both name their limit's Place, the limit
// earlier in the stack decides (docs/limits.md, "Escalation"); on a tie,
// or when either names no limit, the stricter action in the order Pass <
// Warn < Hold < Freeze < Defer < Reject.
func (d Decision) Ahead(o Decision) bool {
	if d.Action.Answers() && o.Action.Answers() && d.Place > 0 && o.Place > 0 && d.Place != o.Place {
		return d.Place < o.Place
	}
	return d.Action > o.Action
}

// Measure is one limit's measurement of one request; rates in cost per
// period.
type Measure struct {
	Limit, Key    string
	Cost          float64 // in the limit's unit
	Before, After float64 // the key's rate before and with this request
	Max           float64 // the limit in force, after overrides
	Over          bool
	Action        Action        // the limit's action when Over, else Pass
	RetryAfter    time.Duration // 0 if not Over
	Stored        bool          // counted into the stored state
}

// Decision is the engine's verdict on one Request; the zero value is Pass.
type Decision struct {
	Action   Action
	Code     int    // SMTP reply code of Defer and Reject (450, 550)
	Enhanced string // RFC 3463 code ("4.7.1")
	// Text is the client text as the limit's template expands it; the
	// front ends make it safe for the wire (mta.ReplyText).
	Text   string
	Header string // "Name: value" to prepend (Warn)
	Reason string // for the log, never sent
	// The limit that decided (empty for Pass): its name, key, measured
	// rate and limit per Period, and the wait before the key may send.
	Limit      string
	Key        string
	Rate       float64
	Max        float64
	Period     time.Duration
	RetryAfter time.Duration
	// Place is the deciding limit's place in the stack, from 1 (the first
	// [[limit]] in the file); 0 for a decision of no limit (Pass, a fault).
	Place int
	// Outcome is an outcome limit's counts, e.g. "23 of the last 60
	// recipients bounced (limit 10% of at least 50 per 1h)".
	Outcome  string
	Measures []Measure // every limit that applied, in stack order
	// Fault is set on a fail-open Pass after a store fault or panic, or
	// when some limits could not be measured; it is logged and counted.
	Fault error
	// Repeated: the message's verdict given again at a later request.
	Repeated bool
}
