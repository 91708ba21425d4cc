package policy

import (
	"log/slog"
	"time"
)

// Protocol states as Postfix sends them in the protocol_state attribute
// (SMTPD_POLICY_README). Milter front ends use the same values.
const (
	StateConnect      = "CONNECT"
	StateEHLO         = "EHLO"
	StateHELO         = "HELO"
	StateMail         = "MAIL"
	StateRcpt         = "RCPT"
	StateData         = "DATA"
	StateEndOfMessage = "END-OF-MESSAGE"
	StateVrfy         = "VRFY"
	StateEtrn         = "ETRN"
)

// Request is one policy query, MTA-neutral, with the Postfix
// policy-delegation attributes (the milter fills them from macros). The
// engine does not modify it.
type Request struct {
	// ProtocolState is protocol_state: RCPT, DATA, END-OF-MESSAGE, ...
	ProtocolState string
	// ProtocolName is protocol_name: SMTP, ESMTP, LMTP.
	ProtocolName string
	// HeloName is helo_name.
	HeloName string
	// QueueID is queue_id; empty at RCPT in Postfix before the queue file
	// exists.
	QueueID string
	// Sender is the envelope sender (sender), "" for the null sender.
	Sender string
	// Recipient is the envelope recipient of this RCPT (recipient).
	Recipient string
	// RecipientCount is recipient_count: 0 at RCPT, the number of accepted
	// recipients at DATA and END-OF-MESSAGE.
	RecipientCount int
	// ClientAddress is client_address (IPv4 or IPv6 text).
	ClientAddress string
	// ClientName is client_name, the verified reverse name or "unknown".
	ClientName string
	// ReverseClientName is reverse_client_name.
	ReverseClientName string
	// Instance is instance: the same for every request of one message.
	Instance string
	// SASLMethod, SASLUsername and SASLSender are sasl_method,
	// sasl_username and sasl_sender; SASLUsername is empty for an
	// unauthenticated client.
	SASLMethod, SASLUsername, SASLSender string
	// Size is size: the message size in bytes, known at END-OF-MESSAGE
	// (or as declared with MAIL FROM SIZE=).
	Size int64
	// Stage is the front end that asked: ViaPolicy ("policy": Postfix
	// policy delegation or Exim readsocket) or ViaMilter ("milter"). Limits
	// with a Via list only measure requests of those front ends.
	Stage string
	// Received is when the front end received the request (the policy
	// service: its first byte; the milter: the call of its Decider), the
	// time a daemon decides it at, so that the request path reads the
	// clock once; zero when the front end did not record it (the decider
	// then reads the clock itself). It is not an attribute of the
	// request and is not logged.
	Received time.Time
}

// LogValue implements slog.LogValuer: one request's log attributes, the
// same for every front end.
func (r *Request) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("state", r.ProtocolState),
		slog.String("client", r.ClientAddress),
		slog.String("sasl_username", r.SASLUsername),
		slog.String("sender", r.Sender),
		slog.String("recipient", r.Recipient),
		slog.Int("rcpt_count", r.RecipientCount),
		slog.Int64("size", r.Size),
		slog.String("queue_id", r.QueueID),
		slog.String("instance", r.Instance),
	)
}
