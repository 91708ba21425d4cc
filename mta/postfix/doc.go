// Package postfix implements the Postfix policy delegation protocol
// (SMTPD_POLICY_README, "Protocol description"), which Exim's ${readsocket}
// speaks too: a Decoder, WriteReply, and a Server in the shape of net/http.
// Bad input closes the connection without a reply. Replies (access(5)):
//
//	Pass    DUNNO
//	Defer   450 4.7.1 text  (Decision.Code and Enhanced when valid 4xx)
//	Reject  550 5.7.1 text  (valid 5xx)
//	Hold    HOLD text       (Freeze too: only the milter can freeze)
//	Warn    PREPEND header, or WARN text where Postfix would ignore it
//
// Where Postfix ignores HOLD (before MAIL, VRFY, ETRN) WARN is sent. Every
// reply is one line of valid UTF-8 within MaxReplyLen. Queue runs the MTA's
// queue commands.
package postfix
