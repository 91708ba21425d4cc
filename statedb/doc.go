// Package statedb owns the daemon's one BoltDB state file (go.etcd.io/bbolt,
// https://github.com/etcd-io/bbolt; STATE_DIR/ratelimitd.db, shared by the
// rate state, the recipient sets and the quarantine): it opens the file
// safely (Open), refusing a damaged one with an error that names the file,
// the cause and the way out (Damaged); it checks the file and reports what
// is readable (Check, `ratelimitd state check`); and it copies every
// readable bucket into a new file (Salvage). Every value the stores keep
// is a checksummed record (Seal, Unseal), and every bucket of records has
// a checksummed manifest entry, its count of values and its sequence,
// written in the same transaction as its records (Tally, Update); Scan
// reads every record and compares every bucket with its entry, so that a
// record damaged, missing, or hidden with its bucket is reported, never
// silently forgotten.
//
// BoltDB follows page references without checking them. A branch page
// that refers to itself or an ancestor sends its cursor, and its own
// consistency check (bbolt.Tx.Check), into an endless descent that ends in
// a fatal stack overflow, not a recoverable panic; a free list whose count
// exceeds its page makes bbolt.Open read or allocate past the file.
// CheckPages walks the page tree without BoltDB (the on-disk format of
// bbolt's internal/common package: 16-byte page headers, branch and leaf
// elements, inline buckets, two meta pages checksummed with FNV-64a) and
// reports such a file before it is opened; it also checks that each
// page's elements lie packed as BoltDB writes them, which finds a damaged
// element count (BoltDB would read the page without the elements past
// it). A meta page that fails its checksum makes BoltDB read the
// transaction before it, silently: MetaFallback reports it. Open then turns BoltDB's panics,
// and faults on a truncated mapping, into errors, compares the file's size
// with the last transaction's high-water mark and runs Tx.Check. Opens take
// the file lock with a 1 s timeout, so a CLI never hangs on a database the
// running daemon holds.
//
// # Errors
//
// Every error about the file's content wraps ErrDamaged; one about a
// structure BoltDB cannot read without hanging or crashing also wraps
// ErrUnreadable, and then nothing may be read from the file with BoltDB.
// A damaged file without ErrUnreadable can be read with BoltDB's panics
// recovered (what remains may be salvaged). A missing or unreadable file
// is reported as the os error. ratestore.ErrDamaged is ErrDamaged, so one
// errors.Is test covers a damaged file found by CheckPages, by Open and by
// the stores that read it.
//
// # Concurrency
//
// CheckPages reads the file with ReadAt one page at a time and holds no
// state between calls: it is safe for concurrent use. It takes no lock on
// the file, so run it before bbolt.Open, while no writer has it open. The
// other functions are safe for concurrent use on distinct files; BoltDB's
// own lock serialises processes on one file.
//
// The package imports nothing of this module: only bbolt and the standard
// library.
package statedb
