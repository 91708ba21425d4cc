package ratestore

import (
	"errors"
	"fmt"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/statedb"
)

var (
	// ErrKeyTooLong is returned by Update for a key over MaxKeyLen.
	ErrKeyTooLong = errors.New("ratestore: key too long")

	// ErrTooManyLimits is returned by Update past MaxLimits limit names.
	ErrTooManyLimits = errors.New("ratestore: too many limit names")

	// ErrFull is returned by Update when a shard's 4 GiB key arena is full.
	ErrFull = errors.New("ratestore: shard full")

	// ErrKeyPressure is returned by Update for a new key in a shard full
	// of protected keys; it wraps policy.ErrKeyTableFull.
	ErrKeyPressure = fmt.Errorf("ratestore: key limit reached, every evictable key is over or near its limit (%w)", policy.ErrKeyTableFull)

	// ErrReadOnly is returned by writes to a read-only Persistent.
	ErrReadOnly = errors.New("ratestore: rate state opened read-only")

	// ErrDamaged (statedb.ErrDamaged) is wrapped for an unreadable file.
	ErrDamaged = statedb.ErrDamaged

	// ErrClosed is returned by Flush after Close.
	ErrClosed = errors.New("ratestore: store closed")

	// ErrVersion is returned for rate state or a record of another format.
	ErrVersion = errors.New("ratestore: unknown rate state format")

	// errMalformedRecord is returned by decodeRecord for an unparsable record.
	errMalformedRecord = errors.New("ratestore: malformed rate journal record")
)
