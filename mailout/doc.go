// Package mailout sends ratelimitd's own mail over SMTP (RFC 5321) with the
// emersion/go-smtp client: it re-injects thawed and released messages into
// the MTA (the original envelope sender and recipients, the stored message
// bytes, and a trace header naming the thaw), and the same client sends the
// quarantine's delivery status notifications (RFC 3464) and package
// notify's notification mail.
//
// The re-injection address is an MTA listener that neither rate-limits nor
// runs milters, e.g. a second Postfix smtpd on 127.0.0.1:10026 with
// "-o smtpd_milters= -o smtpd_recipient_restrictions=permit_mynetworks,reject"
// in master.cf (configs/postfix-master.cf).
//
// Errors are prefixed "mailout:" and wrap the *gosmtp.SMTPError or the
// network error. A Reinjector is safe for concurrent use; each Reinject
// opens its own connection.
package mailout
