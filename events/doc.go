// Package events is ratelimitd's history of the decisions that matter: every
// refusal (defer, reject, hold, freeze), warning, quarantine action (thaw,
// delete, expire, automatic release), rate reset, suspend/resume of the
// automatic release and configuration reload, recorded as an Event (time,
// key, limit, action, rate, max, sender, client, queue ID, who, detail) so
// that a postmaster can answer "who did we defer yesterday, and how often?"
// with `ratelimitd events` long after the rates have decayed.
//
// # Storage
//
// A Log lives in the daemon's BoltDB state file (go.etcd.io/bbolt), in two
// top-level buckets of its own: events/log holds one record per event,
// keyed by its time (8 bytes, big-endian Unix nanoseconds) and a sequence
// number (8 bytes, big-endian, the bucket's NextSequence), so that keys
// sort by time and pruning deletes from the front of the bucket;
// events/meta holds the format version and the number of records. A
// record is a version byte, the strings (key, limit, action, sender,
// client, queue ID, by, detail: each a uvarint length and its bytes, at
// most MaxField bytes), the rate and max (IEEE 754, 8 bytes each), and a
// CRC-32C over the key and all that (a statedb record: an event damaged
// on disk is reported, by Query and by the daemon's scan of the state
// file, never read as another; Formats describes them to statedb). Both
// buckets have manifest entries (statedb.Tally). A log of format 1,
// without checksums, is converted when Open can write. With
// typical fields the file grows by about 145 bytes per event, BoltDB's
// pages included (docs/performance.md; BenchmarkStateFileGrowth).
//
// The log is bounded by age (Options.MaxAge, 30 days by default) and by
// count (Options.MaxCount, 1,000,000): after each flush the oldest records
// beyond either bound are deleted.
//
// # Write-behind
//
// Record never blocks the caller on the disk: it encodes the event into a
// bounded in-memory queue (Options.QueueSize events, at most 32 MiB) and
// returns, keeping none of the caller's memory; Run writes the
// queue to the file every Options.FlushInterval in one transaction, as
// package ratestore does with the rate state. When the queue is full the
// event is dropped and counted (Stats.Dropped), so memory never grows
// without bound; a crash loses at most one flush interval of events.
// Query and Summary flush first, so a caller reads what it recorded.
//
// # Read-only use
//
// Open on a database opened read-only (the CLI when no daemon runs) gives
// a Log that answers Query and Summary and drops what is recorded.
//
// # Concurrency
//
// A Log's methods are safe for concurrent use. A nil *Log records nothing
// (Record does nothing), which is how the daemon runs with events off.
package events
