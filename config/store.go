package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Store is the [store] table: where rate state lives. The default backend
// "local" keeps it in memory and in the BoltDB file of server.state_dir;
// "redis" shares it between the hosts of a site through Redis (standalone,
// Sentinel or Cluster; see package ratestore/redisstore).
type Store struct {
	// Backend is "local" (default) or "redis".
	Backend string `toml:"backend"`
	// RedisAddrs are host:port addresses: one for a standalone server,
	// several for a Redis Cluster, the Sentinels when
	// RedisSentinelMaster is set. Default ["127.0.0.1:6379"].
	RedisAddrs []string `toml:"redis_addrs"`
	// RedisSentinelMaster names the master set the Sentinels monitor.
	RedisSentinelMaster string `toml:"redis_sentinel_master"`
	// RedisUsername, RedisPassword and RedisDB are Redis's AUTH and
	// SELECT parameters; RedisTLS uses TLS (system roots) for every
	// connection.
	RedisUsername string `toml:"redis_username"`
	RedisPassword string `toml:"redis_password"`
	RedisDB       int    `toml:"redis_db"`
	RedisTLS      bool   `toml:"redis_tls"`
	// RedisTimeout bounds each request's Redis round trip; past it
	// OnRedisError applies. Default 200ms.
	RedisTimeout policy.Duration `toml:"redis_timeout"`
	// OnRedisError is "local" (default: decide with this host's copy of
	// the states Redis returned, add what it counted to Redis on
	// recovery), "dunno" or "defer".
	OnRedisError string `toml:"on_redis_error"`
	// DegradedShare is how much of each limit a host may use while it
	// decides locally: "last" (default: the limit, from the last state
	// it knew) or "split" (the limit divided among RedisHosts hosts).
	DegradedShare string `toml:"degraded_share"`
	// RedisHosts is the number of hosts sharing the Redis state (for
	// DegradedShare "split" and the documented bound); default 1.
	RedisHosts int `toml:"redis_hosts"`
	// RedisKnownRecords is how many rate keys' Redis records each host
	// remembers for the fast path (the decision made on the host and
	// only confirmed by the script; docs/redis.md): 0 means the default,
	// 114,688 (about 11 MiB), -1 turns the fast path off.
	RedisKnownRecords int `toml:"redis_known_records"`
	// KeyPrefix starts every Redis key; default "ratelimitd:". It must not
	// contain '{' or '}' (Redis Cluster hash tags).
	KeyPrefix string `toml:"key_prefix"`
}

// Defaults for Store.
const (
	DefaultRedisAddr    = "127.0.0.1:6379"
	DefaultRedisTimeout = 200 * time.Millisecond
	DefaultKeyPrefix    = "ratelimitd:"
)

// Redis reports whether the Redis backend is selected.
func (s *Store) Redis() bool { return s.Backend == "redis" }

func (s *Store) withDefaults() {
	if s.Backend == "" {
		s.Backend = "local"
	}
	if len(s.RedisAddrs) == 0 {
		s.RedisAddrs = []string{DefaultRedisAddr}
	}
	if s.RedisTimeout == 0 {
		s.RedisTimeout = policy.Duration(DefaultRedisTimeout)
	}
	if s.OnRedisError == "" {
		s.OnRedisError = "local"
	}
	if s.DegradedShare == "" {
		s.DegradedShare = "last"
	}
	if s.RedisHosts == 0 {
		s.RedisHosts = 1
	}
	if s.KeyPrefix == "" {
		s.KeyPrefix = DefaultKeyPrefix
	}
}

// validate checks the table; limits are the configured stack (the Redis
// script implements every algorithm but baseline), requestTimeout the
// server's (a Redis round trip must end well before it).
func (s *Store) validate(limits []policy.LimitConfig, requestTimeout policy.Duration) []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("store.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	switch s.Backend {
	case "local":
		return nil
	case "redis":
	default:
		bad("backend", "%q is not a backend (want local or redis)", s.Backend)
		return errs
	}
	if s.RedisTimeout < 0 {
		bad("redis_timeout", "must be positive")
	}
	if requestTimeout > 0 && s.RedisTimeout >= requestTimeout {
		bad("redis_timeout", "%s is not below server.request_timeout (%s): a Redis that hangs would leave requests unanswered "+
			"and on_redis_error never applied; keep it well under Postfix's policy time limit too "+
			"(smtpd_policy_service_timeout, default 100s; the MTA gives up first)",
			time.Duration(s.RedisTimeout), time.Duration(requestTimeout))
	}
	switch s.DegradedShare {
	case "last", "split":
	default:
		bad("degraded_share", "%q (want last or split)", s.DegradedShare)
	}
	if s.RedisHosts < 1 {
		bad("redis_hosts", "must be at least 1")
	}
	if s.RedisKnownRecords < -1 {
		bad("redis_known_records", "%d (want a number of records, 0 for the default or -1 for none)", s.RedisKnownRecords)
	}
	switch s.OnRedisError {
	case "local", "dunno", "defer":
	default:
		bad("on_redis_error", "%q (want local, dunno or defer)", s.OnRedisError)
	}
	if strings.ContainsAny(s.KeyPrefix, "{}") {
		bad("key_prefix", "%q must not contain '{' or '}'", s.KeyPrefix)
	}
	for _, a := range s.RedisAddrs {
		if !strings.Contains(a, ":") {
			bad("redis_addrs", "%q is not host:port", a)
		}
	}
	for _, l := range limits {
		if l.Algorithm == "baseline" {
			errs = append(errs, fmt.Errorf("limit %s: algorithm \"baseline\" is not available with store.backend = \"redis\" (exponential, gcra, cooldown and earrrl are)", l.Name))
		}
	}
	return errs
}
