// Package postfix implements the Postfix SMTP access policy delegation
// protocol (SMTPD_POLICY_README, "Protocol description"), which Exim's
// ${readsocket} speaks too: a Decoder from name=value lines to a
// policy.Request, WriteReply from a policy.Decision to an access(5) action,
// and a Server in the shape of net/http on persistent unix or TCP
// connections. Bad input closes the connection without a reply, as the
// README asks; Exim's request, ended by EOF after a whole line, is
// answered and the connection closed.
//
// Reply mapping:
//
//	Pass    DUNNO
//	Defer   450 4.7.1 text   (Decision.Code and Enhanced when valid 4xx)
//	Reject  550 5.7.1 text   (Decision.Code and Enhanced when valid 5xx)
//	Hold    HOLD text        (Freeze too: only the milter can freeze)
//	Warn    PREPEND header   (Decision.Header set, state MAIL, RCPT or DATA)
//	Warn    WARN text        (otherwise)
//
// Defer is a numeric 450, acted on where check_policy_service runs, not
// DEFER_IF_PERMIT. Numeric replies always carry text (Postfix reads a bare
// number as OK). Where Postfix ignores HOLD or PREPEND (before MAIL, VRFY,
// ETRN; PREPEND at END-OF-MESSAGE) WARN is sent. Every reply is one line of
// valid UTF-8 without controls, at most MaxReplyLen bytes.
//
// Queue runs the MTA's queue commands (postsuper, postqueue, postcat, or
// Exim's) for quarantine/lifecycle.
package postfix
