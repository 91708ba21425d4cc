package statedb

import "errors"

var (
	// ErrDamaged is wrapped by every error about the state file's content.
	ErrDamaged = errors.New("statedb: damaged state file")

	// ErrPermission is wrapped (with fs.ErrPermission) by Open's error
	// when this process may not open the state file or enter its directory.
	ErrPermission = errors.New("statedb: permission denied")

	// ErrUnreadable is wrapped by CheckPages' error for a structure BoltDB
	// cannot read without hanging or crashing.
	ErrUnreadable = errors.New("a structure BoltDB cannot read safely")
)
