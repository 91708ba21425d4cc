package policy

import "errors"

var (
	ErrInvalidConfig = errors.New("policy: invalid configuration") // wraps every configuration error
	ErrPanic         = errors.New("policy: panic while deciding")  // Decision.Fault after a recovered panic
	ErrUnknownLimit  = errors.New("policy: no such limit")         // Engine.Reset
	// ErrKeyTableFull is wrapped by a store's error for a new key it cannot
	// track without evicting a key over or near its limit; answered per
	// Config.OnFull.
	ErrKeyTableFull = errors.New("policy: key table full")
)
