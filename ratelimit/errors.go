package ratelimit

import "errors"

var (
	// ErrUnknownAlgorithm is returned by ParseAlgorithm and Limit.Validate
	// for an algorithm name or value this package does not implement.
	ErrUnknownAlgorithm = errors.New("ratelimit: unknown algorithm")
	// ErrUnknownMode is returned by ParseMode and Limit.Validate for a mode
	// name or value this package does not implement.
	ErrUnknownMode = errors.New("ratelimit: unknown mode")
	// ErrInvalidLimit is returned by Limit.Validate for a non-positive limit
	// or period.
	ErrInvalidLimit = errors.New("ratelimit: invalid limit")
	// ErrAddrSetFormat is returned by AddrSet.UnmarshalBinary for data
	// that AddrSet.MarshalBinary did not write.
	ErrAddrSetFormat = errors.New("ratelimit: malformed recipient set")
)
