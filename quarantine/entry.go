package quarantine

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// State is an entry's life-cycle state (zero: invalid): Held or Frozen,
// then Thawed or Deleted, which stay without message until Expire.
type State uint8

// The states, encoded and parsed by their names ("held", ...).
const (
	Held State = iota + 1
	Frozen
	Thawed
	Deleted
)

var stateNames = [...]string{Held: "held", Frozen: "frozen", Thawed: "thawed", Deleted: "deleted"}

// String returns the state's name, or "state(N)" for an invalid value.
func (s State) String() string {
	if s >= Held && s <= Deleted {
		return stateNames[s]
	}
	return "state(" + strconv.Itoa(int(s)) + ")"
}

// Pending reports whether s is Held or Frozen.
func (s State) Pending() bool { return s == Held || s == Frozen }

// ParseState returns the State named name, case-insensitively (ErrInvalid).
func ParseState(name string) (State, error) {
	for s := Held; s <= Deleted; s++ {
		if strings.EqualFold(name, stateNames[s]) {
			return s, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown state %q", ErrInvalid, name)
}

// MarshalText implements encoding.TextMarshaler.
func (s State) MarshalText() ([]byte, error) {
	if s < Held || s > Deleted {
		return nil, fmt.Errorf("%w: invalid state %d", ErrInvalid, s)
	}
	return []byte(stateNames[s]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *State) UnmarshalText(b []byte) (err error) {
	*s, err = ParseState(string(b))
	return err
}

// Entry is one quarantined message: the decision, envelope, a few header
// fields and its state. Entries the Store returns are copies.
type Entry struct {
	// ID is set by the Store: 16 hex digits that sort in creation order.
	ID string `json:"id"`
	// State is set by the Store.
	State State `json:"state"`
	// Created is when recorded (zero: now), Updated when last changed.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`

	// The decision: Rate and Max in cost per period; Action "hold" or
	// "freeze".
	Limit  string  `json:"limit,omitempty"`
	Key    string  `json:"key,omitempty"`
	Rate   float64 `json:"rate"`
	Max    float64 `json:"max"`
	Action string  `json:"action,omitempty"`

	// Envelope and client, as the MTA reported them.
	Sender        string   `json:"sender"`
	Recipients    []string `json:"recipients,omitempty"`
	ClientAddress string   `json:"client_address,omitempty"`
	ClientName    string   `json:"client_name,omitempty"`
	SASLUsername  string   `json:"sasl_username,omitempty"`
	// QueueID is the MTA's (ValidQueueID); Instance, the policy
	// "instance" attribute, joins a hold at RCPT to END-OF-MESSAGE's.
	QueueID  string `json:"queue_id,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Unverified says why the MTA's queue did not confirm QueueID.
	Unverified string `json:"unverified,omitempty"`

	// Size is the message size in bytes (stored, or MTA-reported if held).
	Size int64 `json:"size"`
	// Subject (RFC 2047 decoded) and MessageID (no <>), from the header.
	Subject   string `json:"subject,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	// Hash is the hex SHA-256 of a frozen entry's message.
	Hash string `json:"hash,omitempty"`

	// ThawedTo is the host:port of the last re-injection, ThawedAs the
	// queue ID its 250 named (mailout.QueuedAs), else its text.
	ThawedTo string `json:"thawed_to,omitempty"`
	ThawedAs string `json:"thawed_as,omitempty"`

	// Error is the last failed release's text; Attempts counts releases.
	Error    string `json:"error,omitempty"`
	Attempts int    `json:"attempts,omitempty"`

	// Claim is the token of the process acting on it since ClaimedAt.
	Claim     string    `json:"claim,omitempty"`
	ClaimedAt time.Time `json:"claimed_at,omitzero"`
}

// WriteTo writes the entry as "Name: value" lines, omitting empty fields
// and cleaning values (termsafe.Line).
func (e *Entry) WriteTo(w io.Writer) (int64, error) {
	num := func(n int64) string { return strings.TrimPrefix(strconv.FormatInt(n, 10), "0") } // "" for 0
	tm := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339)
	}
	rate, client := "", e.ClientName
	if e.Rate != 0 || e.Max != 0 {
		rate = strconv.FormatFloat(e.Rate, 'f', -1, 64) + " / " + strconv.FormatFloat(e.Max, 'f', -1, 64)
	}
	if e.ClientAddress != "" {
		client += "[" + e.ClientAddress + "]"
	}
	fields := [][2]string{{"ID", e.ID}, {"State", e.State.String()}, {"Created", tm(e.Created)}, {"Updated", tm(e.Updated)},
		{"Action", e.Action}, {"Limit", e.Limit}, {"Key", e.Key}, {"Rate", rate}, {"Sender", cmp.Or(e.Sender, "<>")}}
	for _, r := range e.Recipients {
		fields = append(fields, [2]string{"Recipient", r})
	}
	fields = append(fields, [][2]string{{"Client", client}, {"SASL username", e.SASLUsername}, {"Queue ID", e.QueueID},
		{"Instance", e.Instance}, {"Unverified", e.Unverified}, {"Size", num(e.Size)}, {"Subject", e.Subject},
		{"Message-ID", e.MessageID}, {"SHA-256", e.Hash}, {"Thawed to", e.ThawedTo}, {"Thawed as", e.ThawedAs}, {"Thaw attempts", num(int64(e.Attempts))}, {"Last error", e.Error}}...)
	var b strings.Builder
	for _, f := range fields {
		if f[1] != "" {
			fmt.Fprintf(&b, "%-15s %s\n", f[0]+":", termsafe.Line(f[1]))
		}
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// Queue IDs reach postsuper, postcat or exim as argv, so only these pass:
// Postfix short (src/global/mail_queue.h) and long (postconf(5)
// enable_long_queue_ids) forms, Exim's (spec chapter "How Exim receives
// and delivers mail"), XXXXXX-XXXXXXXXXXX-XXXX since 4.97.
const (
	maxQueueIDLen = 32
	postfixSafe   = "0123456789BCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz" // safe_ultostr.c
)

var queueIDSyntax = regexp.MustCompile(`^(?:[0-9A-F]{6,}|[` + postfixSafe + `]{10,}z[` + postfixSafe[:51] + `]+|` +
	`[0-9A-Za-z]{6}-(?:[0-9A-Za-z]{6}-[0-9A-Za-z]{2}|[0-9A-Za-z]{11}-[0-9A-Za-z]{4}))$`)

// ValidQueueID reports whether id is a Postfix or Exim queue ID (at most
// 32 ASCII letters, digits and dashes, not starting with '-').
func ValidQueueID(id string) bool {
	return len(id) <= maxQueueIDLen && queueIDSyntax.MatchString(id)
}

// QueuedMessage is one message of the MTA's queue listing (postqueue(1) -j).
type QueuedMessage struct {
	Queue      string // "hold", "incoming", "active", "deferred", "maildrop"
	QueueID    string // not yet checked with ValidQueueID
	Arrival    time.Time
	Sender     string // "" for the null sender
	Recipients []string
	Size       int64 // bytes (Postfix: message_size); 0 if unknown
}
