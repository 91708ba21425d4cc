// Package redisstore keeps ratelimitd's rate state in Redis (or Valkey), so
// that several MTA hosts share one sender's rate: two submission servers
// behind a load balancer count a compromised account once, `rate show` sees
// the whole picture and `rate reset` on one host is seen by all at once.
//
// A Store implements policy.Store (Get, Update, Delete, Range: the `rate`
// commands) and policy.StackEvaluator: each policy request's stack of
// limits is decided by one server-side Lua script (stack.lua; EVALSHA,
// loaded once) that applies the arithmetic of package ratelimit (the Exim
// specification's ratelimit ACL condition, chapter "Access control
// lists", section "Rate limiting incoming messages", for the exponential
// algorithm, with expm1 written out for Lua 5.1; GCRA after Tony Finch's
// rate-limiting notes; cooldown and EARRRL) on the server's clock
// (Redis TIME), so MTAs whose clocks differ get the same answers. The
// script measures every limit, decides the stack's verdict with its own
// copy of the stack rule (ratelimit.StackAdmits: a leaky limit counts only
// when the whole stack admits; the conformance suite ratestore/storetest
// keeps the copies in step), stores
// each counted limit's new state and gives it an expiry computed from the
// arithmetic (no earlier than the time at which the state is negligible,
// see ratelimit.Limit.Negligible, and at most an eighth of the state's
// lifetime after it), so Redis memory follows the active senders
// and no timer forgives an offender early.
//
// The script implements every algorithm of package ratelimit
// (exponential, GCRA, cooldown, EARRRL) and every mode.
//
// # Batching
//
// On a standalone or Sentinel-managed Redis, the requests that arrive
// while a script call is in flight wait in a batch and are decided
// together by one call, one after the other in arrival order, each seeing
// the states the previous ones stored (the same answers as separate calls
// made back to back), up to 256 limits per call (a request that finds the
// waiting batch full is sent alone). The batch is sent when the call in
// flight ends, or earlier, as a second call in flight, once it holds 32
// limits (16 requests of two limits), so that under load Redis has the
// next batch when it finishes one. Requests of concurrent callers have no
// order between them, as with separate calls. A request whose caller
// gives up while it waits is not sent. An idle store adds no wait. Redis's
// cost per decided stack is what limits the throughput of all the MTAs
// together, and a script call's fixed costs (EVALSHA, the limits'
// parameters, TIME, one MGET of all the keys) are then paid once per
// batch. A Redis Cluster's requests fall in many slots and one call may
// touch one slot only: there each request (each slot of it) is one call.
//
// # Keys and Redis Cluster
//
// The state of rate key K under limit L is the Redis string
// PREFIX + "{" + K + "}" + L (K with '%', '{' and '}' percent-escaped)
// holding 20 bytes: the Unix time of the last counted update as seconds
// (int64) and nanoseconds (uint32), and the rate (float64), little-endian;
// the decision script appends 8 more, the key's expiry as it set it (Unix
// milliseconds on Redis's clock, float64), so that a later decision that
// needs no later expiry keeps it (SET KEEPTTL) instead of setting one (a
// large share of a decision's cost; docs/performance.md). An expiry it
// sets is
// an eighth of the state's lifetime past the moment the state becomes
// negligible; a steady sender's key gets a new one every so often.
// The braces are a Redis Cluster hash tag: all the limits of one rate key
// live in one slot and are decided by one script call. A stack whose keys
// fall in several slots (for example a per-user and a per-client-address
// limit) is decided in two steps: the script checks every slot without
// writing, the verdict is computed from all of them, then the script
// commits on every slot, re-measuring each counted limit on its current
// state with that verdict. Each slot is atomic; between the two steps
// another request of the same keys may be counted, exactly as in the
// reference policy.EvaluateStack (atomic per key, not per stack).
//
// The client is github.com/redis/rueidis, chosen over go-redis/v9 by a
// measured comparison (scripts/redis-client-bench, figures in
// docs/performance.md): its automatic pipelining of concurrent requests
// gave the higher throughput at 64 concurrent callers (the cluster's
// calls and the CLI's still use it; the daemon's requests on one node
// are batched as above).
//
// # Outages
//
// Failover keeps the limit while Redis, or a cluster node, does not
// answer: it decides from a write-through copy of the states Redis
// returned (optionally each host's share, Failover.Split), switches back
// as soon as a probe reads from Redis, and adds what it counted during
// the outage to the shared state exactly once (Store.Merge, merge.lua).
// docs/redis.md states the bound on what a sender gets during an outage.
//
// # Errors
//
// Every failure to get an answer from Redis in time wraps ErrUnavailable
// (Failover then decides per its OnError policy); an answer the store
// cannot read is ErrProtocol; an item whose algorithm the script does not
// know gets ErrAlgorithm in its StackResult; New returns ErrConfig for
// unusable Options.
//
// # Concurrency
//
// Store and Failover are safe for concurrent use; concurrent callers'
// requests are batched as above.
package redisstore
