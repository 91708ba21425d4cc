package ratelimit

import "errors"

var (
	ErrUnknownAlgorithm = errors.New("ratelimit: unknown algorithm")             // ParseAlgorithm, Limit.Validate
	ErrUnknownMode      = errors.New("ratelimit: unknown mode")                  // ParseMode, Limit.Validate
	ErrInvalidLimit     = errors.New("ratelimit: invalid limit")                 // Limit.Validate
	ErrAddrSetFormat    = errors.New("ratelimit: malformed recipient set")       // AddrSet.UnmarshalBinary
	ErrNotFinite        = errors.New("ratelimit: converted state is not finite") // Limit.Convert: NaN or infinity
)
