// Package mailout sends ratelimitd's own mail over SMTP (RFC 5321):
// re-injected thawed messages, DSNs (RFC 3464) and notify's mail, to an
// MTA listener that neither rate-limits nor runs milters. Errors are
// prefixed "mailout:" and wrap the *gosmtp.SMTPError or network error.
package mailout
