package maillog

import (
	"slices"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// Entries returns the policy requests an MTA would have made for m
// (SMTPD_POLICY_README): a RCPT per recipient, END-OF-MESSAGE when it was
// queued, instance "host/queueid"; then its Outcomes at their times.
func (m *Message) Entries() []simulate.Entry {
	base := policy.Request{
		Sender:        m.Sender,
		ClientAddress: m.ClientAddress,
		ClientName:    m.ClientName,
		Instance:      m.QueueID,
		SASLMethod:    m.SASLMethod,
		SASLUsername:  m.SASLUsername,
		Stage:         policy.ViaPolicy,
	}
	if m.Host != "" {
		base.Instance = m.Host + "/" + m.QueueID
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
