package quarantine

import "errors"

// Errors the Store returns, possibly wrapped; others wrap bbolt's.
var (
	// ErrNotFound: no entry has the ID.
	ErrNotFound = errors.New("quarantine: no such entry")
	// ErrNoContent: the entry has no stored message (it is not frozen).
	ErrNoContent = errors.New("quarantine: entry has no stored message")
	// ErrFull: the message would exceed Options.MaxSize; nothing stored.
	ErrFull = errors.New("quarantine: quarantine is full")
	// ErrState: the entry is not in a state the change starts from.
	ErrState = errors.New("quarantine: entry is not in a state that allows this")
	// ErrBusy: this process is acting on the entry already (Claim).
	ErrBusy = errors.New("quarantine: entry is being released or deleted right now")
	// ErrInterrupted: a re-injection stopped midway, maybe delivered.
	ErrInterrupted = errors.New("quarantine: an earlier action on this entry was interrupted")
	// ErrCorrupt: stored data cannot be decoded or fails its SHA-256.
	ErrCorrupt = errors.New("quarantine: stored data is corrupt")
	// ErrDuplicateQueueID: another pending entry has the queue ID.
	ErrDuplicateQueueID = errors.New("quarantine: another quarantined message already has this queue ID")
	// ErrNoQueueList: the MTA's queue cannot be listed.
	ErrNoQueueList = errors.New("quarantine: no command configured to list the MTA's queue (queue_list_command)")
	// ErrInvalid: an invalid argument (nil entry, invalid queue ID, ...).
	ErrInvalid = errors.New("quarantine: invalid argument")
	// ErrNoSync: New was given a database with NoSync set.
	ErrNoSync = errors.New("quarantine: database has NoSync set; quarantined mail would not be durable")
	// ErrVersion: the buckets are of another format version.
	ErrVersion = errors.New("quarantine: unsupported quarantine format version")
)
