// Package redisstore keeps ratelimitd's rate state in Redis (or Valkey), so
// that several MTA hosts share each sender's rate.
//
// A Store implements policy.Store and policy.StackEvaluator: a request's
// stack of limits is decided by one Lua script (stack.lua) on Redis's
// clock (TIME), so hosts whose clocks differ get the same answers. The
// script has its own copy of package ratelimit's arithmetic (the Exim
// specification, chapter "Access control lists", section "Rate limiting
// incoming messages", for the exponential algorithm; GCRA after Tony
// Finch's rate-limiting notes; cooldown; EARRRL) and of
// ratelimit.StackAdmits, which the conformance suite ratestore/storetest
// keeps in step. It implements every mode and every algorithm but
// baseline, whose items get ErrAlgorithm. A state expires an eighth of its
// lifetime after it becomes negligible (ratelimit.Limit.Negligible).
//
// All the limits of a rate key share one string, its record (Store.Key):
// the key's expiry as last set (Unix ms on Redis's clock, float64), then
// per limit a length byte, the limit's name and its state (Unix seconds
// int64, nanoseconds uint32, rate float64; little-endian). A decision
// reads and writes each record once, and sets an expiry only when a state
// needs a later one than the key has. The record's name holds the rate
// key as a Redis Cluster hash tag.
//
// Requests that arrive while a script call is in flight to a Redis server
// (the standalone one, or each Cluster master) are decided together by
// the next call, in arrival order, each seeing what the previous ones
// stored (batch.go). A request whose records the store knows is decided
// in Go, and the script only stores the new records if the old ones are
// still those expected, else decides it itself (fast.go). On a Cluster a
// request the master does not serve is sent again through the cluster
// client, which follows MOVED and ASK, and a stack of several slots is
// checked on every slot, then committed on every slot: atomic per key, as
// policy.EvaluateStack is, not per stack.
//
// Failover decides while Redis, or a Cluster node, does not answer, from a
// write-through copy of the states Redis returned, and adds what it
// counted meanwhile to Redis exactly once (Store.Merge, merge.lua).
// docs/redis.md states the bound on what a sender gets during an outage.
//
// Store and Failover are safe for concurrent use.
package redisstore
