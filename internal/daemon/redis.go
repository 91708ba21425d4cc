package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// redisOptions maps the [store] table to the Redis store's options. limits
// looks a limit's parameters up by name (for the expiry of merged states).
func redisOptions(s config.Store, limits func(string) (ratelimit.Limit, bool)) redisstore.Options {
	o := redisstore.Options{Addrs: s.RedisAddrs, SentinelMaster: s.RedisSentinelMaster, Username: s.RedisUsername,
		Password: s.RedisPassword, DB: s.RedisDB, Timeout: time.Duration(s.RedisTimeout), KeyPrefix: s.KeyPrefix,
		Limits: limits, KnownRecords: s.RedisKnownRecords}
	if s.RedisTLS {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o
}

// engineLimits returns a lookup of the engine's current limits by name.
func engineLimits(eng func() *policy.Engine) func(string) (ratelimit.Limit, bool) {
	return func(name string) (ratelimit.Limit, bool) {
		e := eng()
		if e == nil {
			return ratelimit.Limit{}, false
		}
		return e.LimitParams(name)
	}
}

// pendingMergeFile is the file in state_dir that keeps the counts of a
// Redis outage not yet added to Redis (redisstore.Failover.LoadPending).
const pendingMergeFile = "redis-outage-counts.json"

// openRedis connects the daemon to the shared rate state: a Failover over
// the Redis store and local, the host's own store (which keeps a copy of
// every state Redis returns). Redis need not answer at start: the daemon
// then serves per on_redis_error and joins Redis when it comes.
func (d *Daemon) openRedis(s config.Store, local policy.Store) (*redisstore.Failover, error) {
	pol, err := redisstore.ParseOnError(s.OnRedisError)
	if err != nil {
		return nil, err
	}
	o := redisOptions(s, engineLimits(func() *policy.Engine { return d.engine }))
	d.badStates = newOncePerKey(10000)
	o.OnBadState = func(limit, key string) {
		if d.metrics != nil {
			d.metrics.Fault("redis bad state")
		}
		if d.badStates.first(limit + "\x00" + key) {
			d.log.Warn("undecodable rate state in redis replaced by a fresh one", "limit", limit, "key", key)
		}
	}
	o.OnRoundTrip = func(took time.Duration) {
		if d.metrics != nil {
			d.metrics.RedisRoundTrip(took)
		}
	}
	r, err := redisstore.Open(o)
	if err != nil {
		return nil, fmt.Errorf("store: redis %v: %w", s.RedisAddrs, err)
	}
	// Unreachable (or loading): the Failover starts degraded, logs it
	// once and joins Redis from its probe.
	cctx, cancel := context.WithTimeout(context.Background(), max(time.Duration(s.RedisTimeout), time.Second))
	r.Connect(cctx)
	cancel()
	f := redisstore.NewFailover(r, local, d.log, redisstore.FailoverOptions{OnError: pol,
		Split: s.DegradedShare == "split", Hosts: s.RedisHosts})
	if err := f.LoadPending(filepath.Join(d.cfg.Server.StateDir, pendingMergeFile)); err != nil {
		d.log.Warn("counts of an earlier redis outage not loaded", "err", err)
	}
	d.redisClient = r
	d.redisLog = newThrottledLog(d.log, 10*time.Second)
	return f, nil
}

// throttledLog logs a line per message at most once per every, with the
// number of occurrences it stood for.
type throttledLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

func newThrottledLog(log *slog.Logger, every time.Duration) *throttledLog {
	return &throttledLog{log: log, every: every, last: map[string]time.Time{}, count: map[string]int{}}
}

// warn logs msg at Warn with args and the count of occurrences since the
// last line of msg, unless one was logged less than every ago.
func (t *throttledLog) warn(msg string, args ...any) {
	t.mu.Lock()
	t.count[msg]++
	now := time.Now()
	if now.Sub(t.last[msg]) < t.every {
		t.mu.Unlock()
		return
	}
	n := t.count[msg]
	t.last[msg], t.count[msg] = now, 0
	t.mu.Unlock()
	t.log.Warn(msg, append(args, "occurrences", n, "per", t.every.String())...)
}

// oncePerKey remembers up to max keys, to log something once per key.
type oncePerKey struct {
	mu   sync.Mutex
	seen map[string]struct{}
	max  int
}

func newOncePerKey(max int) *oncePerKey { return &oncePerKey{seen: map[string]struct{}{}, max: max} }

// first reports whether k is seen for the first time (always true once
// max keys are remembered).
func (o *oncePerKey) first(k string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[k]; ok {
		return false
	}
	if len(o.seen) < o.max {
		o.seen[k] = struct{}{}
	}
	return true
}

// redisClock answers the rate commands on Redis's clock (TIME; the host's
// clock corrected by the last offset while Redis is down), the clock the
// decisions use, instead of the clock of the host asked.
type redisClock struct {
	admin.Rates
	now func(context.Context) time.Time
}

func (r redisClock) Lookup(ctx context.Context, _ time.Time, key string) ([]policy.KeyRate, error) {
	return r.Rates.Lookup(ctx, r.now(ctx), key)
}

func (r redisClock) All(ctx context.Context, _ time.Time) ([]policy.KeyRate, error) {
	return r.Rates.All(ctx, r.now(ctx))
}
