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
	ProtocolState     string // protocol_state: RCPT, DATA, END-OF-MESSAGE, ...
	ProtocolName      string // protocol_name: SMTP, ESMTP, LMTP
	HeloName          string // helo_name
	QueueID           string // queue_id; Postfix has none yet at RCPT
	Sender            string // sender; "" for the null sender
	Recipient         string // recipient of this RCPT
	RecipientCount    int    // recipient_count: 0 at RCPT, the accepted ones at DATA and END-OF-MESSAGE
	ClientAddress     string // client_address
	ClientName        string // client_name, or "unknown"
	ReverseClientName string // reverse_client_name
	Instance          string // instance: the same for every request of one message
	// sasl_method, sasl_username (empty: unauthenticated), sasl_sender.
	SASLMethod, SASLUsername, SASLSender string
	Size                                 int64     // size in bytes: at END-OF-MESSAGE, or MAIL FROM SIZE=
	Stage                                string    // the front end: ViaPolicy or ViaMilter
	Received                             time.Time // when it arrived, the time it is decided at (zero: now)
	// LocalUser (local_user) is the uid of the local user who submitted
	// non-SMTP mail (Postfix pickup's Received: header, Exim's
	// $caller_uid); "" for SMTP mail.
	LocalUser string
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
