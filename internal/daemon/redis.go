package daemon

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// redisOptions maps [store] to the Redis store's options.
func redisOptions(s config.Store, limits func(string) (ratelimit.Limit, bool)) redisstore.Options {
	o := redisstore.Options{Addrs: s.RedisAddrs, SentinelMaster: s.RedisSentinelMaster, Username: s.RedisUsername,
		Password: s.RedisPassword, DB: s.RedisDB, Timeout: time.Duration(s.RedisTimeout), KeyPrefix: s.KeyPrefix,
		Limits: limits, KnownRecords: s.RedisKnownRecords}
	if s.RedisTLS {
		o.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return o
}

// engineLimits returns a lookup by name of the limits of *eng, once set.
func engineLimits(eng **policy.Engine) func(string) (ratelimit.Limit, bool) {
	return func(name string) (ratelimit.Limit, bool) {
		if *eng == nil {
			return ratelimit.Limit{}, false
		}
		return (*eng).LimitParams(name)
	}
}

// pendingMergeFile, in state_dir, keeps the counts of a Redis outage not
// yet added to Redis.
const pendingMergeFile = "redis-outage-counts.json"

// openRedis returns a Failover over Redis and local; Redis need not
// answer at start.
func (d *Daemon) openRedis(s config.Store, local policy.Store) (*redisstore.Failover, error) {
	pol, err := redisstore.ParseOnError(s.OnRedisError)
	if err != nil {
		return nil, err
	}
	o := redisOptions(s, engineLimits(&d.engine))
	var mu sync.Mutex
	logged := map[string]bool{} // logged once each, up to 10,000
	o.OnBadState = func(limit, key string) {
		d.metrics.Fault("redis bad state")
		mu.Lock()
		first := !logged[limit+"\x00"+key]
		if first && len(logged) < 10000 {
			logged[limit+"\x00"+key] = true
		}
		mu.Unlock()
		if first {
			d.log.Warn("undecodable rate state in redis replaced by a fresh one", "limit", limit, "key", key)
		}
	}
	o.OnRoundTrip = d.metrics.RedisRoundTrip
	r, err := redisstore.Open(o)
	if err != nil {
		return nil, fmt.Errorf("store: redis %v: %w", s.RedisAddrs, err)
	}
	// Unreachable: the Failover starts degraded and joins from its probe.
	cctx, cancel := context.WithTimeout(context.Background(), max(time.Duration(s.RedisTimeout), time.Second))
	r.Connect(cctx)
	cancel()
	f := redisstore.NewFailover(r, local, d.log, redisstore.FailoverOptions{OnError: pol,
		Split: s.DegradedShare == "split", Hosts: s.RedisHosts})
	if err := f.LoadPending(filepath.Join(d.cfg.Server.StateDir, pendingMergeFile)); err != nil {
		d.log.Warn("counts of an earlier redis outage not loaded", "err", err)
	}
	d.redisClient = r
	d.redisLog = srvconn.NewThrottledLog(d.log, 10*time.Second)
	return f, nil
}

// redisClock answers the rate commands on Redis's clock, the decisions'.
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
