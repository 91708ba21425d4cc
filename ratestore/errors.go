package ratestore

import (
	"errors"
	"fmt"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/statedb"
)

var (
	// ErrKeyTooLong is returned by Update for a key longer than
	// MaxKeyLen bytes.
	ErrKeyTooLong = errors.New("ratestore: key too long")

	// ErrTooManyLimits is returned by Update past MaxLimits limit names.
	ErrTooManyLimits = errors.New("ratestore: too many limit names")

	// ErrFull is returned by Update when a shard's key arena cannot grow
	// (4 GiB of key bytes).
	ErrFull = errors.New("ratestore: shard full")

	// ErrKeyPressure is returned by Update for a new key when its shard
	// holds MaxKeys keys over or near their limit, which are never
	// evicted. It wraps policy.ErrKeyTableFull (answered by on_full).
	ErrKeyPressure = fmt.Errorf("ratestore: key limit reached, every evictable key is over or near its limit (%w)", policy.ErrKeyTableFull)

	// ErrReadOnly is returned by Update, Delete and Flush of a read-only
	// Persistent.
	ErrReadOnly = errors.New("ratestore: rate state opened read-only")

	// ErrDamaged (statedb.ErrDamaged) is wrapped by the errors of the
	// stores that find the file unreadable: a page BoltDB panics on, or
	// an inconsistency.
	ErrDamaged = statedb.ErrDamaged

	// ErrClosed is returned by Flush after Close.
	ErrClosed = errors.New("ratestore: store closed")

	// ErrVersion is returned by NewPersistent for rate state of another
	// format, and by compaction for a journal record of another version.
	ErrVersion = errors.New("ratestore: unknown rate state format")
)

// errMalformedRecord is returned by decodeRecord for a journal record it
// cannot parse.
var errMalformedRecord = errors.New("ratestore: malformed rate journal record")
