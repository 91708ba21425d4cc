// Package events is the history of the decisions that matter: refusals,
// warnings, quarantine actions, rate resets, suspend/resume and reloads,
// each an Event, queried by `ratelimitd events`.
//
// A Log lives in the state file (go.etcd.io/bbolt), bucket events/log:
// one statedb record (version 3) per event keyed by class (1 byte: 0 for
// Decisions, 1 for every other action), time (Unix ns) and sequence (8
// bytes each, big-endian), holding the strings key, limit, action,
// sender, client, queue ID, by and detail (uvarint length, bytes, each
// through Clip), then count (4 bytes), last (Unix ns) and rate and max
// (IEEE 754 bits), all big-endian; events/meta holds format and the
// record count of each class. Each class has its own bounds (MaxAge and
// MaxCount, ActionMaxAge and ActionMaxCount); records beyond them are
// pruned, oldest first, so no flood of refusals prunes an operator's
// action. The Decisions of one key, limit and action within one
// Options.Coalesce interval are one record whose count and last time
// grow, so a flood from one key costs one record an interval.
//
// Record queues without waiting for the disk (bounded per class, drops
// counted); Tick (statedb.Flusher) writes the queue and the grown counts.
// A Log is safe for concurrent use; a nil *Log records nothing.
package events
