// Package milter is the milter front end: a Server speaking the Sendmail 8
// mail filter protocol (github.com/emersion/go-milter) to Postfix
// (MILTER_README) and Sendmail. It asks an mta.Decider at every RCPT
// (Defer and Reject refuse that recipient) and at end of message, where of
// the message's decisions the one of the limit earliest in the stack
// applies, as in the engine (policy.Decision.Ahead; a tie or a decision of
// no limit: the stricter action): Warn adds its header, Hold has the daemon
// record the message and then quarantines it (SMFIR_QUARANTINE), Freeze
// stores the message (kept, if a freeze could apply, in memory and an
// unlinked spool file) and only once it is durable discards the MTA's copy;
// a failure temp-fails, never discards. Replies go through mta.ReplyText
// with '%' doubled. Every packet's length is checked before go-milter parses
// it, every read and write has a deadline, and a panic in an event handler
// temp-fails the command and closes the connection.
package milter
