// Package milter is the milter front end: a Server speaking the Sendmail 8
// mail filter protocol (github.com/emersion/go-milter) to Postfix
// (MILTER_README) and Sendmail. It asks an mta.Decider at every RCPT
// (Defer and Reject refuse that recipient) and at end of message, where the
// decision ahead in the stack applies (policy.Decision.Ahead): Warn adds
// its header, Hold is recorded, then quarantined (SMFIR_QUARANTINE), Freeze
// stores the message and only once it is durable discards the MTA's copy;
// a failure temp-fails, never discards. Every packet's length is checked
// before go-milter parses it and every read and write has a deadline.
package milter
