package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

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
		Limits: limits}
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

// openRedis connects the daemon to the shared rate state: a Failover over
// the Redis store and local, the host's own store. Redis must answer at
// start.
func (d *Daemon) openRedis(s config.Store, local policy.Store) (*redisstore.Failover, error) {
	pol, err := redisstore.ParseOnError(s.OnRedisError)
	if err != nil {
		return nil, err
	}
	r, err := redisstore.New(context.Background(), redisOptions(s, engineLimits(func() *policy.Engine { return d.engine })))
	if err != nil {
		return nil, fmt.Errorf("store: redis %v: %w", s.RedisAddrs, err)
	}
	f := redisstore.NewFailover(r, local, pol, d.log)
	d.redisClient = r
	return f, nil
}

// redisDecision turns a request Redis could not decide into a 450 when
// on_redis_error is "defer" (with "dunno" the engine's fail-open DUNNO
// stands). The fault stays set: it is logged and counted.
func (d *Daemon) redisDecision(dec *policy.Decision) {
	if d.redis == nil || dec.Fault == nil || d.cfg.Store.OnRedisError != "defer" || dec.Action != policy.Pass ||
		!errors.Is(dec.Fault, redisstore.ErrUnavailable) {
		return
	}
	*dec = policy.Decision{Action: policy.Defer, Code: 450, Enhanced: "4.7.1",
		Text: "Rate limit service temporarily unavailable, try again later", Reason: "redis unavailable, on_redis_error=defer",
		Fault: dec.Fault}
}
