package policy

import "errors"

var (
	ErrUnknownAction = errors.New("policy: unknown action")        // ParseAction
	ErrUnknownKey    = errors.New("policy: unknown key attribute") // a limit's key
	ErrUnknownPer    = errors.New("policy: unknown cost unit")     // a limit's per
	ErrInvalidConfig = errors.New("policy: invalid configuration") // wraps every configuration error
	ErrPanic         = errors.New("policy: panic while deciding")  // Decision.Fault after a recovered panic
	ErrUnknownLimit  = errors.New("policy: no such limit")         // Engine.Reset
	// ErrKeyTableFull is wrapped by a store's error for a new key it cannot
	// track without evicting a key over or near its limit; answered per
	// Config.OnFull.
	ErrKeyTableFull = errors.New("policy: key table full")
)
