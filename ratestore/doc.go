// Package ratestore holds the rate-state stores of the policy engine, one
// 16-byte ratelimit.State per (limit name, rate key): Memory, a sharded
// in-memory table bounded by MaxKeys with sampled LRU eviction; Persistent,
// a Memory kept in BoltDB by write-behind (snapshot plus journal,
// bolt_format.go); and Recipients, the recent recipients of per = "addr"
// limits. Memory and Persistent implement policy.Store and
// policy.StackEvaluator. Sources: the Exim specification, chapter "Access
// control lists", section "Rate limiting incoming messages"; Tony Finch's
// "Exponential rate limiting" and "ratelimit clarifications".
//
// Update returns ErrKeyTooLong, ErrTooManyLimits, ErrFull or
// ErrKeyPressure without storing anything; a read-only Persistent returns
// ErrReadOnly; a damaged file gives ErrDamaged, another format ErrVersion.
// Every exported method is safe for concurrent use; periodic work runs in
// Tick (statedb.Flusher).
//
// Each shard keeps a slab of fixed 32-byte entries (no pointers), an
// open-addressing table of uint32 slots (8-bit tag, 24-bit index; linear
// probing, backward-shift deletion) and an arena of key bytes; all limits
// of a key share its shard and key bytes.
package ratestore
