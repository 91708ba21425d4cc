// Package statedb reads the daemon's one BoltDB state file (go.etcd.io/bbolt,
// https://github.com/etcd-io/bbolt) safely: it checks the file's structure
// before BoltDB is let near it.
//
// BoltDB follows page references without checking them. A branch page
// that refers to itself or an ancestor sends its cursor, and its own
// consistency check (bbolt.Tx.Check), into an endless descent that ends in
// a fatal stack overflow, not a recoverable panic; a free list whose count
// exceeds its page makes bbolt.Open read or allocate past the file.
// CheckPages walks the page tree without BoltDB (the on-disk format of
// bbolt's internal/common package: 16-byte page headers, branch and leaf
// elements, inline buckets, two meta pages checksummed with FNV-64a) and
// reports such a file before it is opened.
//
// # Errors
//
// Every error about the file's content wraps ErrDamaged; one about a
// structure BoltDB cannot read without hanging or crashing also wraps
// ErrUnreadable, and then nothing may be read from the file with BoltDB.
// A damaged file without ErrUnreadable can be read with BoltDB's panics
// recovered (what remains may be salvaged). A missing or unreadable file
// is reported as the os error. ratestore.ErrDamaged is ErrDamaged, so one
// errors.Is test covers a damaged file found by CheckPages and by the
// stores that read it.
//
// # Concurrency
//
// CheckPages reads the file with ReadAt one page at a time and holds no
// state between calls: it is safe for concurrent use. It takes no lock on
// the file, so run it before bbolt.Open, while no writer has it open.
//
// The package imports nothing of this module.
package statedb
