package policy

import (
	"fmt"
	"slices"
	"time"
)

// Action is what the MTA is told when a limit is over; the zero value is
// Pass.
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

// ParseAction maps a configuration name to an Action.
func ParseAction(s string) (Action, error) {
	if i := slices.Index(actionNames[:], s); i >= 0 {
		return Action(i), nil
	}
	return 0, fmt.Errorf("unknown action %q (want pass, warn, hold, freeze, defer or reject)", s)
}

// Admits reports whether a lets the message on to delivery now (Pass,
// Warn).
func (a Action) Admits() bool { return a <= Warn }

// Answers reports whether a limit over with action a decides the stack's
// answer (Hold, Freeze, Defer, Reject); Pass and Warn do not.
func (a Action) Answers() bool { return a > Warn }

// Refuses reports whether the MTA refuses the message (Defer, Reject); a
// held or frozen message is admitted.
func (a Action) Refuses() bool { return a == Defer || a == Reject }

// Ahead reports whether d decides a message ahead of o, another decision
// on it: the earlier Place when both answer, else the stricter Action.
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
	Text     string // client text, made safe for the wire by the front end
	Header   string // "Name: value" to prepend (Warn)
	Reason   string // for the log, never sent
	// The limit that decided (empty for Pass), its key, the rate and
	// limit per Period, and the wait before the key may send.
	Limit      string
	Key        string
	Rate       float64
	Max        float64
	Period     time.Duration
	RetryAfter time.Duration
	Place      int       // the deciding limit's place in the stack, from 1; 0: none
	Outcome    string    // an outcome limit's counts (outcomeText)
	Measures   []Measure // every limit that applied, in stack order
	// Fault is a store fault or panic that left limits unmeasured; it is
	// logged and counted.
	Fault    error
	Repeated bool // the message's verdict given again at a later request
}
