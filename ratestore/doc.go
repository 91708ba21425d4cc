// Package ratestore holds the rate-state stores of the policy engine, one
// 16-byte ratelimit.State per (limit name, rate key):
//
//   - Memory (memory.go, memory_table.go), a sharded in-memory table with
//     a bound on the number of keys;
//   - Persistent (bolt*.go), which keeps a Memory's state in the daemon's
//     BoltDB file (go.etcd.io/bbolt) by write-behind, so a restart, crash
//     or upgrade does not forgive an offender: bolt_format.go is the
//     on-disk layout (a snapshot plus a journal), bolt_restore.go the
//     restore, bolt_flush.go the write-behind flush and its journal
//     records, bolt_compact.go the compaction of the journal into the
//     snapshot; meta.go keeps each limit's parameters beside its states and
//     converts states when they change;
//   - Recipients (recipients.go), the recent recipients of each per =
//     "addr" limit's keys (ratelimit.AddrSet), also persisted in the file.
//
// Memory and Persistent implement policy.Store and policy.StackEvaluator
// (stack.go): a request's stack of limits is decided under the locks of
// the shards its keys fall in, with the stack rule of ratelimit.StackAdmits
// (a leaky limit counts a request only if every limit of the stack
// admitted it). The arithmetic is package ratelimit's. Sources: the
// Exim specification, chapter "Access control lists", section "Rate
// limiting incoming messages" (the ratelimit ACL condition, its leaky and
// strict modes and the per-key database it keeps); Tony Finch's
// "Exponential rate limiting" and "ratelimit clarifications" notes
// (stacked limits, forgiving mode); the bbolt documentation for the
// file's transactions, copy-on-write commit and FillPercent.
//
// # Errors
//
// Update returns ErrKeyTooLong, ErrTooManyLimits, ErrFull or
// ErrKeyPressure without storing anything (the engine answers [policy]
// on_full, default defer);
// a read-only Persistent returns ErrReadOnly. Reading a damaged file
// returns an error wrapping ErrDamaged, which is statedb.ErrDamaged (run
// statedb.CheckPages before bbolt.Open on a file that may be damaged), and
// a file written in an unknown format ErrVersion.
//
// # Concurrency
//
// Every exported method of Memory, Persistent and Recipients is safe for
// concurrent use. Persistent's background work (flush, sweep, compaction)
// runs in its Run method; Close flushes a last time.
//
// Bounded memory (as the EARRRL write-up advises: LRU, not TTL): when a
// shard is full the least recently seen of a random sample of its keys is
// evicted, so random senders cannot exhaust memory, while an offender that
// keeps sending stays recent and is never forgiven by a timer. A key flood
// does not evict offenders either: keys the Protect predicate (SetProtect)
// reports over or near their limit are never evicted, and when a sample
// holds only such keys the new key is refused (ErrKeyPressure, counted by
// Refused), which the engine answers fail-open. Keys whose rate has decayed
// to nothing are dropped by Sweep.
//
// # Memory layout
//
// A daemon may hold millions of (limit, key) pairs, so Memory avoids Go
// maps and per-entry pointers. Limit names are interned to a 16-bit index.
// Each shard keeps
//
//   - a slab of fixed 32-byte entries (state, key offset and length,
//     last-seen tick, limit index, flags) in chunks of 1024, with a free
//     list; the slab holds no pointers, so the garbage collector never
//     scans it;
//   - an open-addressing hash table of uint32 slots (8-bit hash tag, 24-bit
//     entry index), linear probing with backward-shift deletion, at most
//     3/4 full;
//   - an arena of key bytes, compacted when half of it is garbage. Pairs
//     are placed by the hash of the key alone, so every limit of one key
//     lands in the same shard and probe run, and shares one copy of the
//     key bytes;
//   - once change tracking is on (Persistent, TakeDirty), a list of the
//     entries changed since the last TakeDirty, so a flush costs
//     O(changed keys), not O(keys). A deleted or evicted entry keeps its
//     slot and key bytes, marked dead, until TakeDirty has reported it.
//
// TestMemoryFootprint and BenchmarkMemory2M measure the Go heap per pair
// (figures in docs/performance.md).
package ratestore
