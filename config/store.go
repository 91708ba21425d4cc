package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Store is the [store] table: rate state on this host ("local") or shared
// through Redis (package ratestore/redisstore).
type Store struct {
	Backend             string          `toml:"backend"`
	RedisAddrs          []string        `toml:"redis_addrs"`
	RedisSentinelMaster string          `toml:"redis_sentinel_master"`
	RedisUsername       string          `toml:"redis_username"`
	RedisPassword       string          `toml:"redis_password"`
	RedisDB             int             `toml:"redis_db"`
	RedisTLS            bool            `toml:"redis_tls"`
	RedisTimeout        policy.Duration `toml:"redis_timeout"`
	OnRedisError        string          `toml:"on_redis_error"`
	DegradedShare       string          `toml:"degraded_share"`
	RedisHosts          int             `toml:"redis_hosts"`
	RedisKnownRecords   int             `toml:"redis_known_records"` // 0: default, -1: no fast path
	KeyPrefix           string          `toml:"key_prefix"`
}

// Redis reports whether the Redis backend is selected.
func (s *Store) Redis() bool { return s.Backend == "redis" }

// validate checks the table against the stack (Redis has no baseline) and
// server.request_timeout (a Redis round trip must end well before it).
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
	if requestTimeout > 0 && s.RedisTimeout >= requestTimeout {
		bad("redis_timeout", "%s is not below server.request_timeout (%s): a Redis that hangs would leave requests unanswered "+
			"and on_redis_error never applied; keep it well under Postfix's policy time limit too "+
			"(smtpd_policy_service_timeout, default 100s; the MTA gives up first)",
			time.Duration(s.RedisTimeout), time.Duration(requestTimeout))
	}
	switch s.DegradedShare {
	case "last":
	case "split":
		if s.RedisHosts == 1 {
			bad("degraded_share", "\"split\" needs redis_hosts, the number of hosts sharing the Redis state: with "+
				"redis_hosts = 1 (the default) each host would get the whole limit, as with \"last\"")
		}
	default:
		bad("degraded_share", "%q (want last or split)", s.DegradedShare)
	}
	if s.RedisHosts < 1 {
		bad("redis_hosts", "must be at least 1")
	}
	if s.RedisKnownRecords < -1 {
		bad("redis_known_records", "%d (want a number of records, 0 for the default or -1 for none)", s.RedisKnownRecords)
	}
	if !slices.Contains([]string{"local", "dunno", "defer"}, s.OnRedisError) {
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
