package notify

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// Kind names an event; it is the "event" field of the webhook payload and
// what [notify] events = [...] lists.
type Kind string

// The event kinds.
const (
	// LimitRefused: a limit refused (deferred, rejected, held or froze) a
	// key for the first time in the limit's period. Key, Limit, Period,
	// Action, Rate, Max are set; Sender, Client when known.
	LimitRefused Kind = "limit_refused"
	// QuarantineThreshold: a key's count of held/frozen messages reached
	// Count (the first one, then every multiple of quarantine.alert_every).
	QuarantineThreshold Kind = "quarantine_threshold"
	// Thawed and Deleted: an operator released or deleted Count
	// quarantined messages (Key/Sender name the selection); By says who.
	Thawed  Kind = "thawed"
	Deleted Kind = "deleted"
	// Expired: Count quarantined messages passed quarantine.max_age.
	Expired Kind = "expired"
	// Released: a drip run released Count of Key's held/frozen messages
	// automatically: one event per key and run, when its backlog is
	// released or the run stops with messages left (Detail says why and
	// how many are left).
	Released Kind = "released"
	// RateReset: an operator forgot Key's rate (Limit, or every limit when
	// empty); Count is the number of limit states removed; By says who.
	RateReset Kind = "rate_reset"
)

// Kinds lists every Kind, in the order the documentation gives them.
var Kinds = []Kind{LimitRefused, QuarantineThreshold, Thawed, Deleted, Expired, Released, RateReset}

// Event is one notification. Only Kind is required; zero fields are left
// out of the webhook payload and the mail. Time zero means "when Notify was
// called". Strings are data from the MTA or the operator: the mail builder
// and the webhook encoder escape them, templates see them as they are.
type Event struct {
	Kind Kind `json:"event"`
	// Time is when it happened (UTC in the payload).
	Time time.Time `json:"time"`
	// Key is the rate key value ("alice", "192.0.2.0/24").
	Key string `json:"key,omitempty"`
	// Limit is the limit's name; Period its period (for LimitRefused also
	// the dedup window: one event per key and limit per Period; 0 means 1h).
	Limit  string        `json:"limit,omitempty"`
	Period time.Duration `json:"-"`
	// Action is the limit's action ("defer", "reject", "hold", "freeze").
	Action string `json:"action,omitempty"`
	// Rate and Max are the measured rate and the limit, in cost per Period.
	Rate float64 `json:"rate,omitempty"`
	Max  float64 `json:"max,omitempty"`
	// Sender is the envelope sender; Client the client address.
	Sender string `json:"sender,omitempty"`
	Client string `json:"client_address,omitempty"`
	// Count: messages quarantined (QuarantineThreshold), messages acted on
	// (Thawed, Deleted, Expired, Released) or limit states removed
	// (RateReset).
	Count int `json:"count,omitempty"`
	// Failed counts the messages an operator action could not handle.
	Failed int `json:"failed,omitempty"`
	// By is who ran an operator action: "root (uid 0, pid 4242)" from the
	// admin socket's SO_PEERCRED, or the CLI's user.
	By string `json:"by,omitempty"`
	// Detail is free text (e.g. the client text of the refusal).
	Detail string `json:"detail,omitempty"`

	// rawKey is Key before forMail cleaned it, for KeyArg.
	rawKey *string
}

// KeyArg is Key as one argument of a shell command line (ShellQuote),
// for the command lines a mail suggests: {{.KeyArg}}. It quotes the key as
// the daemon knows it, even in a mail whose Key field was cleaned.
func (e Event) KeyArg() string {
	if e.rawKey != nil {
		return ShellQuote(*e.rawKey)
	}
	return ShellQuote(e.Key)
}

// forMail returns e with every text field made safe for one line of a mail
// (termsafe.Line: control and bidirectional characters become U+FFFD), so
// that client data cannot add lines or headers; KeyArg still quotes the
// original key.
func (e Event) forMail() Event {
	raw := e.Key
	e.rawKey = &raw
	for _, f := range []*string{&e.Key, &e.Limit, &e.Action, &e.Sender, &e.Client, &e.By, &e.Detail} {
		*f = termsafe.Line(*f)
	}
	return e
}

// PeriodText is Period as operators write it ("1h", "24h", "7d"), or "".
func (e Event) PeriodText() string {
	if e.Period <= 0 {
		return ""
	}
	return human.Duration(e.Period)
}

// RateText and MaxText are Rate and Max rounded for people ("201",
// "12.3"); a Rate over Max keeps the decimals it takes to read as more
// than MaxText (200.01 over a limit of 200 is "200.01", never "200").
func (e Event) RateText() string {
	if e.Rate <= e.Max {
		return round(e.Rate)
	}
	lim := e.Max
	if m, err := strconv.ParseFloat(e.MaxText(), 64); err == nil && m > lim {
		lim = m
	}
	if s := round(e.Rate); mustFloat(s) > lim {
		return s
	}
	return human.Rate(e.Rate, lim)
}

func mustFloat(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

// MaxText: see RateText.
func (e Event) MaxText() string { return round(e.Max) }

// Summary is a one-line description of e, the default mail subject and
// the webhook payload's "summary".
func (e Event) Summary() string {
	switch e.Kind {
	case LimitRefused:
		return fmt.Sprintf("%s is over limit %s: %s per %s (limit %s), action %s",
			orNone(e.Key), e.Limit, e.RateText(), e.PeriodText(), e.MaxText(), e.Action)
	case QuarantineThreshold:
		return orNone(e.Key) + " has " + plural.N(e.Count, "quarantined message")
	case Released:
		s := orNone(e.Key) + ": " + plural.N(e.Count, "message") + " released automatically"
		if e.Detail != "" {
			s += " (stopped: " + e.Detail + ")"
		}
		return s
	case Thawed, Deleted, Expired:
		s := fmt.Sprintf("%s %s", plural.N(e.Count, "quarantined message"), e.Kind)
		if sel := e.Key + e.Sender; sel != "" {
			s += " of " + selection(e)
		}
		if e.Failed > 0 {
			s += fmt.Sprintf(", %d failed", e.Failed)
		}
		if e.By != "" {
			s += " by " + e.By
		}
		return s
	case RateReset:
		s := "rate of " + orNone(e.Key) + " reset"
		if e.Limit != "" {
			s += " under limit " + e.Limit
		}
		if e.By != "" {
			s += " by " + e.By
		}
		return s
	}
	return string(e.Kind) + " " + e.Key
}

func selection(e Event) string {
	switch {
	case e.Key != "" && e.Sender != "":
		return e.Key + " (" + e.Sender + ")"
	case e.Key != "":
		return e.Key
	}
	return e.Sender
}

func orNone(s string) string {
	if s == "" {
		return "(empty key)"
	}
	return s
}

// round prints a rate the way the CLI does: rounded to one decimal, and
// without it when that is whole (200.97 is "201", 12.34 is "12.3").
func round(f float64) string {
	r := math.Round(f*10) / 10
	if r == math.Trunc(r) {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}
