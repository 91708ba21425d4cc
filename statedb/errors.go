package statedb

import "errors"

var (
	// ErrDamaged is wrapped by every error about the state file's content:
	// CheckPages', Open's, Check's and those of the stores that read the
	// file (ratestore.ErrDamaged is this value).
	ErrDamaged = errors.New("statedb: damaged state file")

	// ErrUnreadable is wrapped, beside ErrDamaged, by CheckPages' error
	// for a structure BoltDB cannot read without hanging or crashing:
	// nothing may then be read from the file with BoltDB.
	ErrUnreadable = errors.New("a structure BoltDB cannot read safely")
)
