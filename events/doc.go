// Package events is the history of the decisions that matter: refusals,
// warnings, quarantine actions, rate resets, suspend/resume and reloads,
// each an Event, queried by `ratelimitd events`.
//
// A Log lives in the state file (go.etcd.io/bbolt), bucket events/log:
// one statedb record (version 2) per event keyed by time (Unix ns) and
// sequence (8 bytes each, big-endian), holding the strings key, limit,
// action, sender, client, queue ID, by and detail (uvarint length, bytes),
// then rate and max (IEEE 754 bits, big-endian); events/meta holds format
// and count. Records beyond MaxAge or MaxCount are pruned.
//
// Record queues without waiting for the disk (bounded, drops counted);
// Tick (statedb.Flusher) writes the queue. A Log is safe for concurrent
// use; a nil *Log records nothing.
package events
