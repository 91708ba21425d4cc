package policy

import "errors"

var (
	// ErrUnknownAction is returned by ParseAction for an unknown name.
	ErrUnknownAction = errors.New("policy: unknown action")
	// ErrUnknownKey is returned when a limit names a key attribute the
	// engine does not know.
	ErrUnknownKey = errors.New("policy: unknown key attribute")
	// ErrUnknownPer is returned for a cost unit other than mail, rcpt, byte
	// or conn.
	ErrUnknownPer = errors.New("policy: unknown cost unit")
	// ErrInvalidConfig wraps every configuration error from Compile.
	ErrInvalidConfig = errors.New("policy: invalid configuration")
	// ErrPanic is the Decision.Fault of a request whose evaluation panicked.
	ErrPanic = errors.New("policy: panic while deciding")
)

// ErrUnknownLimit is returned by Engine.Reset for a limit name that is not
// configured.
var ErrUnknownLimit = errors.New("policy: no such limit")
