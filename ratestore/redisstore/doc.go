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
// The requests that arrive while a script call is in flight to a Redis
// server (the standalone or Sentinel-managed one, or each Redis Cluster
// master) wait in a batch and are decided together by one call, one
// after the other in arrival order, each seeing the states the previous
// ones stored (the same answers as separate calls made back to back), up
// to 256 limits per call (a request that finds the waiting batch full is
// sent alone). The batch is sent when the call in flight ends, or
// earlier, as a second call in flight to a standalone server, once it
// holds 96 limits (48 requests of two limits), so that under load Redis
// has the next batch when it finishes one. Requests of concurrent callers
// have no order between them, as with separate calls. A request whose
// caller gives up while it waits is not sent. An idle store adds no
// wait. Redis's cost per decided stack is what limits the throughput of
// all the MTAs together, and a script call's fixed costs (EVALSHA, the
// limits' parameters, TIME) are then paid once per batch.
//
// # Fast path
//
// A Store remembers the record of each rate key it last read or stored
// (Options.KnownRecords of them, DefaultKnownRecords by default). A
// request all of whose records it knows is decided in Go, with package
// ratelimit itself, and the script only stores the new records, each
// with one SET ... KEEPTTL GET whose answer must be the record expected;
// if a record changed meanwhile (another host, `rate reset`, a merge),
// the script puts the old ones back and decides the request itself, as
// it does every request whose records are not known, and returns the
// records it left so the next request is fast again. Either way each
// request is decided atomically on what Redis holds. The fast path
// measures at this host's clock corrected by the offset to Redis's clock
// seen in its answers (the script reads TIME at least once a second),
// the script at Redis TIME. It cut Redis's CPU per decided stack by
// about 40% (docs/performance.md); Store.FastPath counts its requests
// confirmed and refused: hosts that send one sender's mail alternately
// are refused while the sender is under its limits.
//
// # Keys and Redis Cluster
//
// All the limits of rate key K share one Redis string, K's record, under
// PREFIX + "{" + K + "}" (K with '%', '{' and '}' percent-escaped; the
// empty K is "%"): the key's expiry as the scripts last set it (Unix
// milliseconds on Redis's clock, float64), then per limit a length byte,
// the limit's name and its 20-byte state: the Unix time of the last
// counted update as seconds (int64) and nanoseconds (uint32), and the
// rate (float64), little-endian. A decision reads each record once and
// writes it once (SET), with a new expiry only when a state needs a later
// one than the key has (else SET KEEPTTL: setting an expiry is a large
// share of a decision's cost; docs/performance.md); an expiry it sets is
// an eighth of the state's lifetime past the moment the state becomes
// negligible, so a steady sender's key gets a new one every so often.
//
// The braces are a Redis Cluster hash tag: a rate key's record and its
// merge markers live in one slot. On a Cluster the requests are batched
// per master (the store reads the slot map with CLUSTER SLOTS): one call
// declares no keys and decides requests of many slots of that master
// (scripts without flags may use keys of other slots of the node they run
// on); a request the master does not serve (moved, or migrating: the
// script reads all of a request's states before it writes any, and
// decides nothing of a request it cannot read) is sent again alone
// through the cluster client, which follows MOVED and ASK. A stack whose
// keys fall in several slots (for example a per-user and a
// per-client-address limit) is decided in two steps: the script checks
// every slot without writing, the verdict is computed from all of them,
// then the script commits on every slot, re-measuring each counted limit
// on its current state with that verdict. Each slot is atomic; between
// the two steps another request of the same keys may be counted, exactly
// as in the reference policy.EvaluateStack (atomic per key, not per
// stack).
//
// The client is github.com/redis/rueidis, chosen over go-redis/v9 by a
// measured comparison (scripts/redis-client-bench, figures in
// docs/performance.md): its automatic pipelining of concurrent requests
// gave the higher throughput at 64 concurrent callers (the CLI's calls
// and a Cluster's multi-slot stacks still use it; the daemon's requests
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
