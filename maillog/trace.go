package maillog

import (
	"bufio"
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// Entries returns the policy requests an MTA would have made for m
// (SMTPD_POLICY_README): a RCPT per recipient when the client was
// accepted, then END-OF-MESSAGE when it was queued, all with instance
// "host/queueid" (Exim: the queue ID); then its Outcomes at their times.
func (m *Message) Entries() []simulate.Entry {
	base := policy.Request{
		Sender:        m.Sender,
		ClientAddress: m.ClientAddress,
		ClientName:    m.ClientName,
		Instance:      instanceOf(m),
		SASLMethod:    m.SASLMethod,
		SASLUsername:  m.SASLUsername,
		Stage:         policy.ViaPolicy,
	}
	out := make([]simulate.Entry, 0, len(m.Recipients)+1)
	for _, rc := range m.Recipients {
		r := base
		r.ProtocolState = policy.StateRcpt
		r.Recipient = rc
		out = append(out, simulate.Entry{Time: m.Received, Count: 1, Request: r})
	}
	r := base
	r.ProtocolState = policy.StateEndOfMessage
	r.QueueID = m.QueueID
	r.Size = m.Size
	r.RecipientCount = m.RecipientCount()
	if len(m.Recipients) == 1 {
		r.Recipient = m.Recipients[0]
	}
	out = append(out, simulate.Entry{Time: m.Queued, Count: 1, Request: r})
	for _, o := range m.Outcomes {
		r := base
		r.ProtocolState, r.Recipient = policy.StateEndOfMessage, o.Recipient
		out = append(out, simulate.Entry{Time: o.Time, Count: 1, Request: r, Outcome: o.Kind})
	}
	return out
}

// Trace returns msgs' Entries in time order (stable), numbered from line 1.
func Trace(msgs []Message) *simulate.Trace {
	t := &simulate.Trace{}
	for i := range msgs {
		t.Entries = append(t.Entries, msgs[i].Entries()...)
	}
	slices.SortStableFunc(t.Entries, func(a, b simulate.Entry) int { return a.Time.Compare(b.Time) })
	for i := range t.Entries {
		t.Entries[i].Line = i + 1
	}
	return t
}

// traceLine is one JSON Lines trace line.
type traceLine struct {
	Time           string `json:"time"`
	ProtocolState  string `json:"protocol_state"`
	SASLUsername   string `json:"sasl_username,omitempty"`
	SASLMethod     string `json:"sasl_method,omitempty"`
	Sender         string `json:"sender"`
	Recipient      string `json:"recipient,omitempty"`
	RecipientCount string `json:"recipient_count,omitempty"`
	Size           string `json:"size,omitempty"`
	ClientAddress  string `json:"client_address,omitempty"`
	ClientName     string `json:"client_name,omitempty"`
	QueueID        string `json:"queue_id,omitempty"`
	Instance       string `json:"instance,omitempty"`
	Count          int    `json:"count,omitempty"`
	Every          string `json:"every,omitempty"`
	Outcome        string `json:"outcome,omitempty"`
}

// WriteTrace writes t as JSON Lines that simulate.Read reads back, after a
// "# header" line unless header is empty.
func WriteTrace(w io.Writer, t *simulate.Trace, header string) error {
	tw := newTraceWriter(w, header)
	for i := range t.Entries {
		tw.entry(&t.Entries[i])
	}
	return tw.flush()
}

type traceWriter struct {
	bw  *bufio.Writer
	enc *json.Encoder
	err error
}

func newTraceWriter(w io.Writer, header string) *traceWriter {
	bw := bufio.NewWriter(w)
	if header != "" {
		bw.WriteString("# " + header + "\n")
	}
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &traceWriter{bw: bw, enc: enc}
}

func (tw *traceWriter) entry(e *simulate.Entry) {
	if tw.err != nil {
		return
	}
	r := &e.Request
	l := traceLine{
		Time:          e.Time.UTC().Format(time.RFC3339Nano),
		ProtocolState: r.ProtocolState,
		SASLUsername:  r.SASLUsername,
		SASLMethod:    r.SASLMethod,
		Sender:        r.Sender,
		Recipient:     r.Recipient,
		ClientAddress: r.ClientAddress,
		ClientName:    r.ClientName,
		QueueID:       r.QueueID,
		Instance:      r.Instance,
	}
	if e.Outcome != 0 {
		l.Outcome = e.Outcome.String()
	} else if r.ProtocolState != policy.StateRcpt {
		l.RecipientCount = strconv.Itoa(r.RecipientCount)
		l.Size = strconv.FormatInt(r.Size, 10)
	}
	if e.Count > 1 {
		l.Count = e.Count
		if e.Every > 0 {
			l.Every = e.Every.String()
		}
	}
	tw.err = tw.enc.Encode(&l)
}

func (tw *traceWriter) flush() error {
	if tw.err != nil {
		return tw.err
	}
	return tw.bw.Flush()
}

// instanceOf is "host/queueid", or the queue ID when there is no host.
func instanceOf(m *Message) string {
	if m.Host == "" {
		return m.QueueID
	}
	return m.Host + "/" + m.QueueID
}
