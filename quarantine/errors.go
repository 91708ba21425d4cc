package quarantine

import "errors"

// Sentinel errors. Every error a Store method returns either is one of these
// (possibly wrapped with %w and context such as the entry ID) or wraps an
// error from go.etcd.io/bbolt (I/O, database closed, read-only database).
// Test with errors.Is.
var (
	// ErrNotFound is returned by Get, Message, WriteMessage, Preview and the
	// state-changing methods when no entry has the given ID.
	ErrNotFound = errors.New("quarantine: no such entry")

	// ErrNoContent is returned by Message, WriteMessage and Store.Preview for
	// an entry that exists but has no stored message: held entries (the
	// MTA keeps the message) and frozen entries that have been thawed or
	// deleted.
	ErrNoContent = errors.New("quarantine: entry has no stored message")

	// ErrFull is returned by Freeze when storing the message would take the
	// total stored message bytes above Options.MaxSize. Nothing is stored;
	// the caller must temp-fail the message, never discard it.
	ErrFull = errors.New("quarantine: quarantine is full")

	// ErrState is returned by MarkThawed, RecordThawError and Delete when the
	// entry is not in a state the transition starts from (only held and
	// frozen entries can be thawed, have a thaw error recorded or be
	// deleted).
	ErrState = errors.New("quarantine: entry is not in a state that allows this")

	// ErrBusy is returned by Claim for an entry this process is acting on
	// already (two concurrent thaws of one message: one of them gets it).
	ErrBusy = errors.New("quarantine: entry is being released or deleted right now")

	// ErrInterrupted is returned by Claim for a frozen entry whose last
	// re-injection was interrupted (the process stopped between claiming
	// and recording the outcome): it may have been delivered already.
	ErrInterrupted = errors.New("quarantine: an earlier action on this entry was interrupted")

	// ErrCorrupt is returned when stored data cannot be decoded, or when a
	// stored message's SHA-256 no longer matches the entry's Hash. A corrupt
	// message is never handed out for re-injection.
	ErrCorrupt = errors.New("quarantine: stored data is corrupt")

	// ErrDuplicateQueueID is returned by Hold, Freeze and UpdateByInstance
	// for a queue ID another pending (held or frozen) entry already
	// names, and (wrapped with ErrState) by LinkQueueID: one queued
	// message is never two entries, so a forged request cannot make a
	// later release or delete act on someone else's message twice.
	ErrDuplicateQueueID = errors.New("quarantine: another quarantined message already has this queue ID")

	// ErrNoQueueList is returned by a queue lister (the life cycle's
	// Queue.List) that has no way to list the MTA's queue: queue IDs then
	// cannot be confirmed, and actions on held mail are refused.
	ErrNoQueueList = errors.New("quarantine: no command configured to list the MTA's queue (queue_list_command)")

	// ErrInvalid is returned for invalid arguments: a nil Entry, a
	// non-positive Expire age.
	ErrInvalid = errors.New("quarantine: invalid argument")

	// ErrNoSync is returned by New when the database has NoSync set: the
	// quarantine promises that a frozen message is on disk (fsync'd) before
	// the MTA is told to discard its copy, which NoSync would break.
	ErrNoSync = errors.New("quarantine: database has NoSync set; quarantined mail would not be durable")

	// ErrLocked is returned (wrapping bbolt's ErrTimeout) by Open when
	// another process — normally the running daemon — holds the database
	// file's lock for longer than Options.LockTimeout. Operators should go
	// through the daemon's admin socket instead.
	ErrLocked = errors.New("quarantine: database is locked by another process (is the daemon running?)")

	// ErrVersion is returned by New when the quarantine buckets were written
	// by a newer, incompatible version of this package.
	ErrVersion = errors.New("quarantine: unsupported quarantine format version")
)
