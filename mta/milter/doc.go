// Package milter is ratelimitd's milter front end: a Server that speaks the
// Sendmail 8 mail filter protocol (github.com/emersion/go-milter, server
// side) to Postfix (smtpd_milters, MILTER_README) and Sendmail
// (INPUT_MAIL_FILTER). It asks an mta.Decider at every RCPT (Defer and
// Reject refuse that recipient) and at end of message, where the strictest
// decision applies:
//
//	Pass     accept
//	Warn     accept; add each Warn decision's Header (SMFIR_ADDHEADER)
//	Defer    450 4.7.1 text; Reject 550 5.7.1 text
//	Hold     Quarantine.Hold, then SMFIR_QUARANTINE and accept
//	Freeze   Quarantine.Freeze; only once it is durable, discard. On any
//	         failure 451 4.3.0 (452 4.3.4 beyond MaxMessageSize): never
//	         discard an unstored message.
//
// A message is kept (memory, then an unlinked spool file) only when a freeze
// could apply (FreezeAdvisor). Requests have Stage policy.ViaMilter; client,
// SASL login, sender and queue ID come from the events and the macros of
// Postfix's default milter_*_macros ({i}, {auth_authen}, {mail_addr},
// {rcpt_addr}, {client_addr}; MILTER_README "Macros").
//
// The server asks for SMFIF_ADDHDRS and SMFIF_QUARANTINE; without the
// latter a Hold is temp-failed. Reply texts go through mta.ReplyText and
// '%' is doubled (Sendmail reads them as a format). Every packet passes a
// framing guard (length checked before go-milter parses it) and every read
// and write has a deadline. A panic in an event handler, Decide included,
// temp-fails the command (451 4.3.0) and closes the connection. Each
// connection has its own goroutine; Server methods are safe for concurrent
// use.
package milter
