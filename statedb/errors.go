package statedb

import "errors"

var (
	// ErrDamaged is wrapped by every error about the state file's content.
	ErrDamaged = errors.New("statedb: damaged state file")

	// ErrUnreadable is wrapped by CheckPages' error for a structure BoltDB
	// cannot read without hanging or crashing.
	ErrUnreadable = errors.New("a structure BoltDB cannot read safely")
)
