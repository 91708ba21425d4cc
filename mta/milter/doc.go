// Package milter is ratelimitd's milter front end: a Server that speaks the
// Sendmail 8 mail filter protocol (through github.com/emersion/go-milter,
// server side) to Postfix (smtpd_milters, MILTER_README) and Sendmail
// (INPUT_MAIL_FILTER), asks an mta.Decider about every recipient and every
// message, and carries out the verdict, including the one thing the policy
// delegation protocol of mta/postfix cannot do: freeze, which stores the
// whole message in the quarantine and has the MTA discard its copy.
//
// # Stages
//
// Every request has Stage "milter" (policy.ViaMilter).
//
//	CONNECT  client address and name from the connect event ("[addr]",
//	         the form for an unverified name, becomes "unknown"), overridden
//	         by the {client_addr}, {client_name} and {client_ptr} macros if
//	         the MTA sends them
//	HELO     helo name
//	MAIL     a new transaction: sender from the MAIL FROM argument with <>
//	         stripped, or {mail_addr}; SASL login from {auth_type},
//	         {auth_authen} and {auth_author}; queue ID from {i}
//	RCPT     Decide(ProtocolState RCPT, Recipient = {rcpt_addr} or the
//	         argument). Defer answers that recipient with the decision's
//	         code (450 4.7.1 by default) and Reject with 550 5.7.1; the
//	         other recipients are unaffected. Any other action accepts the
//	         recipient and is remembered for the end of the message.
//	header,  kept for freezing only if a freeze could apply (a RCPT
//	body     decision was Freeze, or the Decider is no FreezeAdvisor, or
//	         its MayFreeze says so), exactly as the MTA would deliver
//	         them (see Message.Body), up to Server.MaxMessageSize bytes:
//	         the first Server.SpoolThreshold bytes in memory, the rest in
//	         an unlinked temporary file in Server.SpoolDir; otherwise only
//	         counted (Request.Size)
//	EOM      Decide(ProtocolState END-OF-MESSAGE, RecipientCount = the
//	         accepted recipients, Size = bytes of the message, QueueID =
//	         {i}); the strictest of this decision and the RCPT ones applies:
//
//	Pass     accept
//	Warn     accept; add each Warn decision's Header (SMFIR_ADDHEADER)
//	Defer    reply 450 4.7.1 text (the decision's code and text)
//	Reject   reply 550 5.7.1 text
//	Hold     Quarantine.Hold records it, then SMFIR_QUARANTINE (Postfix
//	         moves the message to its hold queue, Sendmail quarantines it)
//	         and accept. A failed record is logged and counted; the MTA
//	         holds the message all the same.
//	Freeze   Quarantine.Freeze first; only once it returned without error
//	         (the message is fsync'd) reply discard: the MTA accepts the
//	         message and drops its copy. If freezing fails: 451 4.3.0; if the
//	         message exceeded MaxMessageSize: 452 4.3.4; if it was not
//	         kept (ErrNotKept) or its spool failed: 451 4.3.0. Never
//	         discard.
//
// # Macros
//
// Postfix sends macros per stage as configured with milter_connect_macros,
// milter_helo_macros, milter_mail_macros, milter_rcpt_macros,
// milter_data_macros, milter_end_of_header_macros and
// milter_end_of_data_macros (MILTER_README, "Macros"). The defaults are
// enough: milter_mail_macros includes i, {auth_type}, {auth_authen},
// {auth_author} and {mail_addr}, milter_rcpt_macros i and {rcpt_addr}, and
// milter_end_of_data_macros i. Postfix chooses the queue ID only after the
// first accepted recipient, so {i} is normally known at end of message, not
// at MAIL. The client's address and name come with the connect event itself;
// add {client_addr} {client_name} {client_ptr} to milter_connect_macros to
// have Postfix's own spelling (and {client_ptr} for ReverseClientName).
//
// # Protocol details
//
// go-milter negotiates milter protocol version 2; the server asks for the
// SMFIF_ADDHDRS and SMFIF_QUARANTINE actions, which Postfix (2.3 and later)
// and Sendmail (8.13 and later) offer, and sets SMFIP_NOUNKNOWN. If an MTA
// does not offer the quarantine action a Hold is temp-failed (451 4.3.0)
// instead, and without SMFIF_ADDHDRS Warn headers are not added.
//
// Reply texts are sanitised (mta.ReplyText) and '%' is doubled,
// because Sendmail uses the reply as a format string (Postfix undoes it).
//
// # Robustness
//
// Every connection is read through a framing guard before go-milter sees a
// byte: each packet's 4-byte big-endian length is checked first, and a
// zero-length packet (ErrEmptyPacket) or one above MaxPacketSize
// (ErrPacketTooLarge) closes the connection, logged and counted, so the
// library never parses it. (go-milter before v0.5.0 indexed the first byte
// of a zero-length packet and panicked; v0.5.0 refuses it, and the guard
// keeps the behaviour independent of the library version.) The guard sets a
// read deadline before every read (ReadTimeout, idle waits included) and a
// write deadline before every write. A panic in Decide or in the server's
// own event handlers is recovered: the command is temp-failed (451 4.3.0),
// the connection closed afterwards, and the daemon carries on. Every log line
// carries the connection id ("conn").
//
// # Front-end contract
//
// Like mta/postfix, the Server uses package mta's contract: the Decider,
// a Metrics that extends mta.Metrics (with the decisions and messages),
// mta's Fault kinds, and mta.LogDecision for the decision log lines.
//
// # Concurrency
//
// Each connection is served on its own goroutine; Decider, Quarantine and
// Metrics are called concurrently from them. Server methods are safe for
// concurrent use.
package milter
