package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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
func (d *daemon) openRedis(s config.Store, local policy.Store) (*redisstore.Failover, error) {
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

// registerRedisMetrics exports the Redis backend's state: whether it is
// degraded and how often it switched.
func (m *metrics) registerRedisMetrics(f *redisstore.Failover) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ratelimitd_redis_degraded",
			Help: "1 while Redis does not answer and requests are decided per on_redis_error, else 0.",
		}, func() float64 {
			if f.Degraded() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ratelimitd_redis_outages_total",
			Help: "Switches from the shared Redis state to on_redis_error.",
		}, func() float64 { return float64(f.Status().Switches) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ratelimitd_redis_recoveries_total",
			Help: "Switches back to the shared Redis state after an outage.",
		}, func() float64 { return float64(f.Status().Recoveries) }),
	)
}

// redisDecision turns a request Redis could not decide into a 450 when
// on_redis_error is "defer" (with "dunno" the engine's fail-open DUNNO
// stands). The fault stays set: it is logged and counted.
func (d *daemon) redisDecision(dec *policy.Decision) {
	if d.redis == nil || dec.Fault == nil || d.cfg.Store.OnRedisError != "defer" || dec.Action != policy.Pass ||
		!errors.Is(dec.Fault, redisstore.ErrUnavailable) {
		return
	}
	*dec = policy.Decision{Action: policy.Defer, Code: 450, Enhanced: "4.7.1",
		Text: "Rate limit service temporarily unavailable, try again later", Reason: "redis unavailable, on_redis_error=defer",
		Fault: dec.Fault}
}

// printStoreStatus prints the Redis backend's line of `ratelimitd status`.
func printStoreStatus(w io.Writer, s *redisstore.FailoverStatus) {
	if s == nil {
		return
	}
	state := "shared (redis answering)"
	if s.Degraded {
		state = "DEGRADED since " + s.Since.Format(time.RFC3339) + ", deciding per on_redis_error=" + s.OnError
	}
	fmt.Fprintf(w, "store: redis, %s; outages %d, recoveries %d\n", state, s.Switches, s.Recoveries)
	if s.LastError != "" {
		fmt.Fprintf(w, "store: last redis error: %s\n", s.LastError)
	}
}

// openRedisRates answers the rate commands from Redis directly when no
// daemon runs: the shared state needs no local file.
func openRedisRates(f *config.File) (rateBackend, error) {
	var eng *policy.Engine
	r, err := redisstore.New(context.Background(), redisOptions(f.Store, engineLimits(func() *policy.Engine { return eng })))
	if err != nil {
		return nil, fmt.Errorf("store: redis %v: %w", f.Store.RedisAddrs, err)
	}
	if eng, err = policy.NewEngine(f.PolicyConfig(), r); err != nil {
		r.Close()
		return nil, err
	}
	return &offlineRates{eng: eng, close_: func() error { r.Close(); return nil }}, nil
}
