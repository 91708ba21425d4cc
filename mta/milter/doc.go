// Package milter is the milter front end: a Server speaking the Sendmail 8
// mail filter protocol (github.com/emersion/go-milter) to Postfix
// (MILTER_README) and Sendmail. It asks an mta.Decider at every RCPT and
// at end of message (policy.Decision.Ahead): Warn adds its header, Hold is
// recorded, then quarantined (SMFIR_QUARANTINE), Freeze discards the MTA's
// copy only once the message is stored; a failure temp-fails. Packet
// lengths are checked before go-milter parses them; reads and writes have
// deadlines.
package milter
