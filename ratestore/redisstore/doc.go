// Package redisstore keeps ratelimitd's rate state in Redis (or Valkey),
// so that several MTA hosts share each sender's rate.
//
// A Store implements policy.Store and policy.StackEvaluator: a stack of
// limits is decided by one Lua script (stack.lua) on Redis's clock (TIME),
// with its own copy of package ratelimit's arithmetic (Exim specification,
// "Rate limiting incoming messages"; GCRA after Tony Finch's notes),
// kept in step by ratestore/storetest. Baseline items get ErrAlgorithm.
// Every script has a "#!lua" shebang without flags and gets every key it
// touches in KEYS. On one server the requests of many stacks share a call;
// with a Cluster each call holds the keys of one slot and rueidis routes
// it (MOVED, ASK): a request the host decided from the records it knows
// (the fast path) is only compared and stored (confirm.lua), and a stack
// of several slots is checked on each, then committed on each.
//
// All limits of a rate key share one string record (Store.Key): expiry
// (Unix ms, float64), then per limit a length byte, the name and its
// state (int64 s, uint32 ns, float64 rate; little-endian). The rate key
// is the record's Redis Cluster hash tag. Failover decides locally while
// Redis is down and merges its counts once on recovery (merge.lua).
//
// Store and Failover are safe for concurrent use.
package redisstore
