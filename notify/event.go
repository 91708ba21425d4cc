package notify

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"al.essio.dev/pkg/shellescape"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// Kind names an event: the payload's "event", what [notify] events lists.
type Kind string

// The event kinds.
const (
	// LimitRefused: a limit refused a key for the first time in its
	// period (Key, Limit, Period, Action, Rate, Max, an outcome limit's
	// Outcome; Sender, Client).
	LimitRefused Kind = "limit_refused"
	// QuarantineThreshold: a key's quarantined messages reached Count.
	QuarantineThreshold Kind = "quarantine_threshold"
	// Thawed and Deleted: operator By released or deleted Count messages.
	Thawed  Kind = "thawed"
	Deleted Kind = "deleted"
	// Expired: Count quarantined messages passed quarantine.max_age.
	Expired Kind = "expired"
	// Released: automatic release let Count of Key's messages go.
	Released Kind = "released"
	// RateReset: operator By removed Count states of Key under Limit.
	RateReset Kind = "rate_reset"
)

// Kinds lists every Kind's name.
var Kinds = []string{string(LimitRefused), string(QuarantineThreshold), string(Thawed), string(Deleted),
	string(Expired), string(Released), string(RateReset)}

// Event is one notification. Only Kind is required (Time: when Notify was
// called); strings are client data, escaped on output.
type Event struct {
	Kind Kind      `json:"event"`
	Time time.Time `json:"time"` // UTC in the payload
	Key  string    `json:"key,omitempty"`
	// Limit is the limit's name, Period its period: for LimitRefused the
	// dedup window too (0: 1h).
	Limit  string        `json:"limit,omitempty"`
	Period time.Duration `json:"-"`
	Action string        `json:"action,omitempty"`
	// Rate and Max are the measured rate and the limit, cost per Period.
	Rate float64 `json:"rate,omitempty"`
	Max  float64 `json:"max,omitempty"`
	// Outcome is an outcome limit's counts (policy.Decision.Outcome):
	// "23 of the last 60 recipients bounced (limit 10% of at least 50 per 1h)".
	Outcome string `json:"outcome,omitempty"`
	Sender  string `json:"sender,omitempty"`
	Client  string `json:"client_address,omitempty"`
	// Count is messages or states; Failed those an action could not handle.
	Count  int    `json:"count,omitempty"`
	Failed int    `json:"failed,omitempty"`
	By     string `json:"by,omitempty"` // who ran an operator action
	Detail string `json:"detail,omitempty"`

	rawKey string // Key before forMail cleaned it, for KeyArg
}

// KeyArg is the uncleaned key as one shell argument (ShellQuote).
func (e Event) KeyArg() string { return ShellQuote(cmp.Or(e.rawKey, e.Key)) }

// forMail returns e with every text field made one termsafe.Line.
func (e Event) forMail() Event {
	e.rawKey = e.Key
	for _, f := range []*string{&e.Key, &e.Limit, &e.Action, &e.Outcome, &e.Sender, &e.Client, &e.By, &e.Detail} {
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

// RateText and MaxText are Rate and Max as human.Number prints them; a
// Rate over Max keeps the decimals to read as more ("200.01").
func (e Event) RateText() string {
	s := human.Number(e.Rate)
	if e.Rate <= e.Max {
		return s
	}
	shown, _ := strconv.ParseFloat(e.MaxText(), 64)
	lim := max(e.Max, shown)
	if r, _ := strconv.ParseFloat(s, 64); r > lim {
		return s
	}
	return human.Rate(e.Rate, lim)
}

// MaxText: see RateText.
func (e Event) MaxText() string { return human.Number(e.Max) }

// Summary describes e in one line (default subject, payload "summary").
func (e Event) Summary() string {
	switch e.Kind {
	case LimitRefused:
		if e.Outcome != "" {
			return fmt.Sprintf("%s: %s, action %s", orNone(e.Key), e.Outcome, e.Action)
		}
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
		switch {
		case e.Key != "" && e.Sender != "":
			s += " of " + e.Key + " (" + e.Sender + ")"
		case e.Key+e.Sender != "":
			s += " of " + e.Key + e.Sender
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

func orNone(s string) string { return cmp.Or(s, "(empty key)") }

// ShellQuote returns s as exactly one POSIX sh argument (POSIX Shell
// Command Language, "Quoting"): single-quoted, or with unsafe runes
// "$(printf '%b' '...')" of octal escapes. Templates: {{shellquote .Key}}.
func ShellQuote(s string) string {
	if termsafe.Line(s) == s && !strings.ContainsAny(s, "\t") {
		return shellescape.Quote(s)
	}
	var b strings.Builder
	b.WriteString(`"$(printf '%b' '`)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1, termsafe.Unsafe(r), r == '\t':
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\0%03o`, c)
			}
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\'':
			b.WriteString(`'\''`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteString(`')"`)
	return b.String()
}
