// Package mailout sends ratelimitd's own mail over SMTP (RFC 5321) with the
// emersion/go-smtp client: thawed messages re-injected with their
// envelope, the quarantine's DSNs (RFC 3464) and package notify's mail.
// The address is an MTA listener that neither rate-limits nor runs
// milters (configs/postfix-master.cf). Errors are prefixed "mailout:" and
// wrap the *gosmtp.SMTPError or the network error.
package mailout
