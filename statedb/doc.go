// Package statedb owns the daemon's one BoltDB state file
// (go.etcd.io/bbolt; STATE_DIR/ratelimitd.db, shared by the rate state,
// the recipient sets, the quarantine and the event log): safe open (Open),
// refusing a damaged file with an error naming the file, the cause and the
// way out (Damaged); a report of what is readable (Check, `ratelimitd
// state check`); a copy of every readable record into a new file
// (Salvage); checksummed records (Seal, Unseal); a manifest of each
// bucket's count and sequence written with its records (Tally, Update),
// which Scan compares; and the one write-behind loop of the stores
// (Flusher).
//
// BoltDB follows page references without checking them: a cycle sends
// bbolt.Tx.Check into a fatal stack overflow, and a free list past its
// page makes bbolt.Open read past the file. CheckPages walks the page tree
// without BoltDB (the format of bbolt's internal/common) and reports what
// BoltDB cannot survive, before it opens the file; Open then recovers
// BoltDB's panics and faults, compares the file's size with its pages, and
// runs Tx.Check. MetaFallback reports a meta page that fails its checksum.
// Opens take the file lock with a 1 s timeout.
//
// # Errors
//
// Every error about the file's content wraps ErrDamaged; one about a
// structure BoltDB cannot read without hanging or crashing also wraps
// ErrUnreadable (nothing may then be read with BoltDB). A missing or
// unreadable file is the os error.
//
// # Concurrency
//
// CheckPages holds no state and takes no lock (run it before bbolt.Open).
// The other functions are safe for concurrent use on distinct files.
package statedb
