// Package postfix implements the Postfix policy delegation protocol
// (SMTPD_POLICY_README, "Protocol description"), which Exim's ${readsocket}
// speaks too: a Decoder, WriteReply, a Server in the shape of net/http, and
// Queue, the MTA's queue commands. Replies (access(5)):
//
//	Pass    DUNNO
//	Defer   450 4.7.1 text  (Decision.Code and Enhanced when valid 4xx)
//	Reject  550 5.7.1 text  (valid 5xx)
//	Hold    HOLD text       (Freeze too), WARN before MAIL, in VRFY, ETRN
//	Warn    PREPEND header, or WARN text where Postfix would ignore it
//
// Every reply is one line of valid UTF-8 within MaxReplyLen.
package postfix
