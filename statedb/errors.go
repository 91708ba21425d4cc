package statedb

import "errors"

var (
	// ErrDamaged is wrapped by CheckPages' error, and by the error of
	// every reader of the state file that finds it cannot be read (a page
	// BoltDB panics on, or an inconsistency): ratestore's NewPersistent,
	// a Persistent's flush or compaction, OpenRecipients and
	// Recipients.Flush. ratestore.ErrDamaged is this same value. Its text
	// ("store: damaged state file") is what the daemon has always
	// printed, and the command line strips it from a cause.
	ErrDamaged = errors.New("store: damaged state file")

	// ErrUnreadable is wrapped, beside ErrDamaged, by CheckPages' error
	// when the file holds a structure BoltDB cannot read without hanging
	// or crashing: then nothing may be read from the file with BoltDB.
	ErrUnreadable = errors.New("a structure BoltDB cannot read safely")
)
