// Package statedb owns the daemon's one BoltDB state file
// (go.etcd.io/bbolt): safe open (Open, CheckPages), reports (Check),
// salvage (Salvage), checksummed records (Seal, Unseal), a per-bucket
// manifest of counts and sequences (Tally, Scan), and the stores'
// write-behind loop (Flusher).
//
// Errors about the file's content wrap ErrDamaged; those BoltDB cannot
// read without hanging or crashing also wrap ErrUnreadable. A missing or
// unreadable file is the os error. Functions are safe for concurrent use
// on distinct files.
package statedb
