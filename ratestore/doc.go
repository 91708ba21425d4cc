// Package ratestore holds the rate-state stores of the policy engine, one
// 16-byte ratelimit.State per (limit name, rate key):
//
//   - Memory: a sharded in-memory table bounded by MaxKeys;
//   - Persistent: a Memory kept in the daemon's BoltDB file by
//     write-behind (a snapshot plus a journal, bolt_format.go), with each
//     limit's parameters beside its states (meta.go);
//   - Recipients: the recent recipients of each per = "addr" limit's keys.
//
// Memory and Persistent implement policy.Store and policy.StackEvaluator:
// a stack of limits is decided under the locks of its keys' shards with
// ratelimit.StackAdmits. Sources: the Exim specification, chapter "Access
// control lists", section "Rate limiting incoming messages"; Tony Finch's
// "Exponential rate limiting" and "ratelimit clarifications".
//
// # Errors
//
// Update returns ErrKeyTooLong, ErrTooManyLimits, ErrFull or
// ErrKeyPressure without storing anything; the engine answers the last
// with [policy] on_full (default defer: 450). A read-only Persistent
// returns ErrReadOnly. A damaged file gives an error wrapping ErrDamaged
// (statedb.ErrDamaged), a file of another format ErrVersion.
//
// # Concurrency
//
// Every exported method of Memory, Persistent and Recipients is safe for
// concurrent use. Their periodic work (flush, sweep, compaction) runs in
// Tick, which statedb.Flusher calls; Close flushes a last time.
//
// # Bounded memory
//
// When a shard is full, the least recently seen of a random sample of its
// keys is evicted (LRU, not TTL: an offender that keeps sending stays
// recent). Keys the Protect predicate (SetProtect) reports over or near
// their limit are never evicted; when a sample holds only such keys the
// new key is refused with ErrKeyPressure (counted by Refused). Sweep drops
// keys whose rate has decayed to nothing.
//
// # Memory layout
//
// Limit names are interned to a 16-bit index. Each shard keeps a slab of
// fixed 32-byte entries in chunks of 1024 (no pointers, so the garbage
// collector never scans it) with a free list; an open-addressing hash
// table of uint32 slots (8-bit tag, 24-bit entry index; linear probing,
// backward-shift deletion, at most 3/4 full); and an arena of key bytes,
// compacted when half garbage. Pairs are placed by the hash of the key
// alone, so every limit of a key shares its shard, probe run and key
// bytes. With change tracking on (Persistent), a list of the entries
// changed since the last TakeDirty makes a flush O(changed keys).
package ratestore
