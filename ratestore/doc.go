// Package ratestore holds rate-state stores for the policy engine: Memory, a
// sharded in-memory table with a bound on the number of keys, and
// Persistent (bolt.go), which keeps a Memory's state in BoltDB by
// write-behind so a restart, crash or upgrade does not forgive an offender.
// Both implement policy.Store and policy.StackEvaluator (stack.go).
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
// With 1,000,000 keys under two limits (keys like "user0000001") this
// comes to 48 bytes of Go heap per pair, 92 MiB in all
// (TestMemoryFootprint, BenchmarkMemory2M); a map of struct keys took 159.
package ratestore
