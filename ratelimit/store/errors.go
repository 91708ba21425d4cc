package store

import "errors"

var (
	// ErrKeyTooLong is returned by Update (of Memory and Persistent) for a
	// key longer than MaxKeyLen bytes; nothing is stored.
	ErrKeyTooLong = errors.New("store: key too long")

	// ErrTooManyLimits is returned by Update when a store would have to
	// hold more than MaxLimits distinct limit names.
	ErrTooManyLimits = errors.New("store: too many limit names")

	// ErrFull is returned by Update when a shard's key arena cannot grow
	// (4 GiB of key bytes in one shard): nothing is stored.
	ErrFull = errors.New("store: shard full")

	// ErrClosed is returned by Persistent.Flush after Close.
	ErrClosed = errors.New("store: persistent store closed")

	// ErrVersion is returned by NewPersistent when the "ratestate" bucket
	// was written in a format this version does not understand.
	ErrVersion = errors.New("store: unknown ratestate format version")
)

// errMalformedRecord is returned by decodeRecord for a journal record it
// cannot parse; compaction logs and drops such a record.
var errMalformedRecord = errors.New("store: malformed rate journal record")
