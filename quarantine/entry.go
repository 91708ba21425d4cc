package quarantine

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// State is the life-cycle state of a quarantine entry. The zero value is
// not a valid state.
//
//	Hold   -> Held   --MarkThawed--> Thawed
//	Freeze -> Frozen --Delete------> Deleted
//
// Held and frozen entries are "pending": they wait for an operator.
// Thawed and deleted entries are kept, without message bytes, as an audit
// record until Expire or Purge removes them.
type State uint8

// The states. Their string names ("held", "frozen", "thawed", "deleted")
// are what Entry encodes to and what ParseState accepts.
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

// pending reports whether the entry still waits for an operator.
func (s State) pending() bool { return s == Held || s == Frozen }

// Pending reports whether an entry in state s still waits for an operator
// (held or frozen).
func (s State) Pending() bool { return s.pending() }

// ParseState returns the State named name (case-insensitive). It returns
// an error wrapping ErrInvalid for an unknown name.
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
func (s *State) UnmarshalText(b []byte) error {
	v, err := ParseState(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Action names recorded in Entry.Action by Hold and Freeze when the caller
// leaves it empty.
const (
	ActionHold   = "hold"
	ActionFreeze = "freeze"
)

// Entry is one quarantined message: the policy decision that put it there,
// the envelope, a few header fields for listing, and its life-cycle state.
// The message bytes of frozen entries are stored separately (see
// Store.Message).
//
// Entries returned by the Store are copies; changing them changes nothing
// stored.
type Entry struct {
	// ID is assigned by Hold and Freeze: 16 lower-case hex digits, the
	// first 11 the creation time in Unix milliseconds, the last 5 a
	// sequence within that millisecond that starts at a random value.
	// IDs sort (as strings) in creation order.
	ID string `json:"id"`
	// State is set by the Store; callers cannot choose it.
	State State `json:"state"`
	// Created is when the entry was recorded (set to the Store's clock if
	// zero). Updated is when it last changed (always set by the Store).
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`

	// Limit is the name of the limit that was exceeded, Key the value of
	// its rate key (e.g. "alice"), Rate the measured rate and Max the
	// limit, both in cost per period. Action is "hold" or "freeze".
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
	// QueueID is the MTA's queue ID (held mail is thawed by it, e.g.
	// postsuper -H). Instance is the Postfix policy "instance" attribute,
	// the same for every policy request about one message; it links a hold
	// recorded at RCPT stage to the END-OF-MESSAGE request that knows the
	// queue ID (see Store.UpdateByInstance).
	QueueID  string `json:"queue_id,omitempty"`
	Instance string `json:"instance,omitempty"`
	// Unverified says why the MTA's queue did not confirm QueueID the
	// last time the life cycle looked (not in the hold queue, another
	// sender or recipients, arrived outside the entry's time): release,
	// delete and show of the held message are refused while it is set.
	// Empty when it was confirmed or never checked.
	Unverified string `json:"unverified,omitempty"`

	// Size is the message size in bytes: the stored bytes for frozen
	// entries (set by Freeze), what the MTA reported for held ones.
	Size int64 `json:"size"`
	// Subject (RFC 2047 decoded, control characters removed) and
	// MessageID (without angle brackets) are taken from the message header
	// by Freeze when the caller leaves them empty.
	Subject   string `json:"subject,omitempty"`
	MessageID string `json:"message_id,omitempty"`
	// Hash is the lower-case hex SHA-256 of the stored message bytes (set
	// by Freeze; empty for held entries).
	Hash string `json:"hash,omitempty"`

	// Error is the text of the last failed thaw attempt; Attempts counts
	// thaw attempts, failed (RecordThawError) and successful (MarkThawed).
	Error    string `json:"error,omitempty"`
	Attempts int    `json:"attempts,omitempty"`

	// Claim is the token of the process acting on the entry right now
	// (Store.Claim), ClaimedAt when it started; both are cleared by
	// MarkThawed, RecordThawError, Delete and Unclaim.
	Claim     string    `json:"claim,omitempty"`
	ClaimedAt time.Time `json:"claimed_at,omitzero"`
}

// WriteTo writes the entry as "Name: value" lines for operator output
// ("ratelimitd quarantine show"), omitting empty fields. Control
// characters in values are replaced, so a hostile Subject cannot drive the
// operator's terminal. It implements io.WriterTo.
func (e *Entry) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	line := func(name, value string) {
		if value == "" {
			return
		}
		fmt.Fprintf(&b, "%-15s %s\n", name+":", cleanLine(value))
	}
	tm := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339)
	}
	line("ID", e.ID)
	line("State", e.State.String())
	line("Created", tm(e.Created))
	line("Updated", tm(e.Updated))
	line("Action", e.Action)
	line("Limit", e.Limit)
	line("Key", e.Key)
	if e.Rate != 0 || e.Max != 0 {
		line("Rate", strconv.FormatFloat(e.Rate, 'f', -1, 64)+" / "+strconv.FormatFloat(e.Max, 'f', -1, 64))
	}
	line("Sender", e.Sender)
	if e.Sender == "" {
		line("Sender", "<>")
	}
	for _, r := range e.Recipients {
		line("Recipient", r)
	}
	client := e.ClientName
	if e.ClientAddress != "" {
		client += "[" + e.ClientAddress + "]"
	}
	line("Client", client)
	line("SASL username", e.SASLUsername)
	line("Queue ID", e.QueueID)
	line("Instance", e.Instance)
	line("Unverified", e.Unverified)
	if e.Size != 0 {
		line("Size", strconv.FormatInt(e.Size, 10))
	}
	line("Subject", e.Subject)
	line("Message-ID", e.MessageID)
	line("SHA-256", e.Hash)
	if e.Attempts != 0 {
		line("Thaw attempts", strconv.Itoa(e.Attempts))
	}
	line("Last error", e.Error)
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}
