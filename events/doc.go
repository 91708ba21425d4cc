// Package events is the history of the decisions that matter: refusals,
// warnings, quarantine actions, rate resets, suspend/resume and reloads,
// each an Event, queried by `ratelimitd events`.
//
// A Log lives in the state file (go.etcd.io/bbolt) in bucket events/log,
// one record per event keyed by time (Unix ns) then sequence (8 bytes
// each, big-endian), and events/meta (format, record count). A record is
// a statedb record (version 2): the strings key, limit, action, sender,
// client, queue ID, by and detail (uvarint length, bytes, at most
// MaxField), then rate and max (IEEE 754 bits, big-endian); a damaged one
// is reported, never read as another. Records older than MaxAge or beyond
// MaxCount are deleted after each flush.
//
// Record never waits for the disk: it encodes the event into a bounded
// queue (QueueSize events, 32 MiB), dropping and counting beyond it; Tick
// (statedb.Flusher) writes the queue in one transaction. Query and Summary
// flush first. On a read-only database a Log answers queries and drops
// what is recorded. A Log is safe for concurrent use; a nil *Log records
// nothing.
package events
