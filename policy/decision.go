package policy

import (
	"fmt"
	"time"
)

// Action is what the MTA is told to do with a message. Actions are ordered by
// strictness: when several limits of a stack fire, the greatest Action wins
// (Reject > Defer > Freeze > Hold > Warn > Pass). The zero value is Pass.
type Action uint8

const (
	// Pass lets the request through: Postfix "DUNNO", milter continue.
	Pass Action = iota
	// Warn lets it through, logs, and optionally adds a header (dry run).
	Warn
	// Hold accepts the message into the MTA's own hold queue (Postfix
	// "HOLD", milter quarantine), recorded in our quarantine index.
	Hold
	// Freeze accepts the message, stores it whole in our quarantine, and
	// tells the MTA to discard its copy (milter only).
	Freeze
	// Defer refuses temporarily: 450 4.7.1 (DEFER_IF_PERMIT).
	Defer
	// Reject refuses permanently: 550 5.7.1.
	Reject
)

var actionNames = [...]string{"pass", "warn", "hold", "freeze", "defer", "reject"}

// String returns the configuration name of a.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// ParseAction maps a configuration name ("pass", "warn", "hold", "freeze",
// "defer", "reject") to an Action; it returns ErrUnknownAction otherwise.
func ParseAction(s string) (Action, error) {
	for i, n := range actionNames {
		if n == s {
			return Action(i), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want pass, warn, hold, freeze, defer or reject)", ErrUnknownAction, s)
}

// Admits reports whether a lets the message proceed to delivery (Pass or
// Warn). Leaky limits count a request only when the stack's action admits it.
func (a Action) Admits() bool { return a <= Warn }

// Measure is one limit's measurement of one request.
type Measure struct {
	// Limit is the configured limit name.
	Limit string
	// Key is the rate key value (e.g. "alice" or "192.0.2.0/24").
	Key string
	// Cost is the cost charged, in the limit's unit (mails, recipients, bytes).
	Cost float64
	// Before is the key's rate decayed to now before this request and
	// After the measured rate with it, both in cost per period.
	Before, After float64
	// Max is the limit (cost per period) in force for this key, after
	// overrides.
	Max float64
	// Over reports that this limit is exceeded.
	Over bool
	// Action is the limit's configured action when Over, else Pass.
	Action Action
	// RetryAfter is how long until the key is allowed again; 0 if not Over.
	RetryAfter time.Duration
	// Stored reports whether the request was counted into the stored state.
	Stored bool
}

// Decision is the engine's verdict on one Request. The zero value is Pass
// with no text.
type Decision struct {
	// Action is the verdict.
	Action Action
	// Code is the SMTP reply code for Defer and Reject (450, 550); 0 else.
	Code int
	// Enhanced is the RFC 3463 enhanced status code ("4.7.1", "5.7.1").
	Enhanced string
	// Text is the client text as the limit's message template expands
	// it; the front ends make it safe for the wire (mta.ReplyText).
	Text string
	// Header is an optional "Name: value" header to prepend (Warn).
	Header string
	// Reason is the log reason; never sent to the client.
	Reason string
	// Limit, Key, Rate, Max, Period and RetryAfter describe the limit that
	// decided (empty for Pass): name, key value, measured rate and limit
	// in cost per Period, and the wait before the key is allowed again.
	Limit      string
	Key        string
	Rate       float64
	Max        float64
	Period     time.Duration
	RetryAfter time.Duration
	// Measures lists every limit that applied, in configuration order.
	Measures []Measure
	// Fault is set when the decision is a fail-open Pass after an internal
	// error (store failure, panic), or when some limits could not be
	// measured and the verdict comes from the others; it is logged and
	// counted.
	Fault error
	// Repeated reports that the verdict was decided at an earlier request
	// of the same message (an earlier RCPT) and is given again without
	// counting the message again.
	Repeated bool
}
