package ratestore

import (
	"errors"
	"fmt"
	"github.com/ratelimitd/ratelimitd/policy"

	"github.com/ratelimitd/ratelimitd/statedb"
)

var (
	// ErrKeyTooLong is returned by Update (of Memory and Persistent) for a
	// key longer than MaxKeyLen bytes; nothing is stored.
	ErrKeyTooLong = errors.New("ratestore: key too long")

	// ErrTooManyLimits is returned by Update when a store would have to
	// hold more than MaxLimits distinct limit names.
	ErrTooManyLimits = errors.New("ratestore: too many limit names")

	// ErrFull is returned by Update when a shard's key arena cannot grow
	// (4 GiB of key bytes in one shard): nothing is stored.
	ErrFull = errors.New("ratestore: shard full")

	// ErrKeyPressure is returned by Update when a new key cannot be stored
	// because its shard is full (MaxKeys) of keys over or near their limit,
	// which are never evicted. Nothing is stored; it wraps
	// policy.ErrKeyTableFull, which the engine answers with [policy]
	// on_full (default defer).
	ErrKeyPressure = fmt.Errorf("ratestore: key limit reached, every evictable key is over or near its limit (%w)", policy.ErrKeyTableFull)

	// ErrReadOnly is returned by Update, Delete and Flush of a Persistent
	// opened with PersistOptions.ReadOnly.
	ErrReadOnly = errors.New("ratestore: rate state opened read-only")

	// ErrDamaged is wrapped by the error of NewPersistent, of a
	// Persistent's flush or compaction, and of OpenRecipients and
	// Recipients.Flush, when the BoltDB file cannot be read (a page BoltDB
	// panics on, or an inconsistency). It is statedb.ErrDamaged, which
	// statedb.CheckPages' error wraps too.
	ErrDamaged = statedb.ErrDamaged

	// ErrClosed is returned by Persistent.Flush after Close.
	ErrClosed = errors.New("ratestore: persistent store closed")

	// ErrVersion is returned by NewPersistent when the "ratestate" bucket
	// was written in a format this version does not understand.
	ErrVersion = errors.New("ratestore: unknown ratestate format version")
)

// errMalformedRecord is returned by decodeRecord for a journal record it
// cannot parse; compaction logs and drops such a record.
var errMalformedRecord = errors.New("ratestore: malformed rate journal record")
