package postfix

import "errors"

// Errors of the codec and the server; codec errors are wrapped with the
// line or attribute (errors.Is). Decode also returns io.EOF before a
// request's first byte, io.ErrUnexpectedEOF inside a line, and the
// reader's own errors.
var (
	ErrLineTooLong       = errors.New("postfix: request line too long")          // longer than MaxLineLen
	ErrTooManyAttributes = errors.New("postfix: too many attributes in request") // more than MaxAttributes
	// ErrMalformed: a line without "=", an empty name, a NUL, an empty
	// request, or a recipient_count or size that is not a decimal >= 0.
	ErrMalformed      = errors.New("postfix: malformed request")
	ErrUnknownRequest = errors.New("postfix: unknown request type")  // request= missing or not smtpd_access_policy
	ErrServerClosed   = errors.New("postfix: server closed")         // Serve after Shutdown or Close; Shutdown/Close again
	ErrNoDecider      = errors.New("postfix: server has no Decider") // Serve
)
