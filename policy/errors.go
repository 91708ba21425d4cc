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
	// ErrKeyTableFull is wrapped by a store's error for a new key it could
	// not store because its key table is full of keys over or near their
	// limit (which are never evicted: that would forgive them). The
	// engine answers such a request with Config.OnFull (default defer).
	ErrKeyTableFull = errors.New("policy: key table full")
)

// ErrUnknownLimit is returned by Engine.Reset for a limit name that is not
// configured.
var ErrUnknownLimit = errors.New("policy: no such limit")
