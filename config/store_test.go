package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

func TestStoreDefaults(t *testing.T) {
	f, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	s := f.Store
	if s.Backend != "local" || s.Redis() || s.OnRedisError != "local" || time.Duration(s.RedisTimeout) != 200*time.Millisecond ||
		s.KeyPrefix != "ratelimitd:" || len(s.RedisAddrs) != 1 || s.RedisAddrs[0] != "127.0.0.1:6379" {
		t.Fatalf("store defaults: %+v", s)
	}
	f, err = config.Parse([]byte(`
[store]
backend = "redis"
redis_addrs = ["10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"]
redis_sentinel_master = "mymaster"
redis_timeout = "150ms"
on_redis_error = "defer"

[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 200
period = "1h"
`), "ok.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !f.Store.Redis() || f.Store.RedisSentinelMaster != "mymaster" || time.Duration(f.Store.RedisTimeout) != 150*time.Millisecond {
		t.Fatalf("parsed: %+v", f.Store)
	}
}

// The Redis backend's constraints are reported with their keys; every
// algorithm but baseline is available with it.
func TestStoreErrors(t *testing.T) {
	_, err := config.Parse([]byte(`
[store]
backend = "redis"
redis_addrs = ["localhost"]
on_redis_error = "panic"
key_prefix = "rl{x}:"
redis_known_records = -2

[[limit]]
name = "burst"
key = ["sasl_username"]
limit = 10
period = "1m"
algorithm = "gcra"
`), "bad.toml")
	if err == nil {
		t.Fatal("invalid [store] accepted")
	}
	if strings.Contains(err.Error(), "gcra") {
		t.Errorf("a gcra limit refused with the redis backend: %v", err)
	}
	for _, want := range []string{`store.redis_addrs: "localhost" is not host:port`, `store.on_redis_error: "panic"`,
		"store.key_prefix", "store.redis_known_records: -2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	_, err = config.Parse([]byte(`
[store]
backend = "redis"

[[limit]]
name = "usual"
key = ["sasl_username"]
limit = 500
period = "1h"
algorithm = "baseline"
`), "baseline.toml")
	if err == nil || !strings.Contains(err.Error(), `limit usual: algorithm "baseline" is not available with store.backend = "redis"`) {
		t.Errorf("baseline with the redis backend: %v", err)
	}
	if _, err := config.Parse([]byte("[store]\nbackend = \"memcached\"\n"), "b.toml"); err == nil ||
		!strings.Contains(err.Error(), `store.backend: "memcached" is not a backend`) {
		t.Errorf("unknown backend: %v", err)
	}
}

// degraded_share = "split" divides a limit by redis_hosts: with one host
// (the default) it would do nothing, so it is refused; with two it is taken.
func TestStoreSplitNeedsHosts(t *testing.T) {
	const stack = "\n[[limit]]\nname = \"hourly\"\nkey = [\"sasl_username\"]\nlimit = 200\nperiod = \"1h\"\n"
	for _, hosts := range []string{"", "redis_hosts = 1\n"} {
		_, err := config.Parse([]byte("[store]\nbackend = \"redis\"\ndegraded_share = \"split\"\n"+hosts+stack), "split.toml")
		if err == nil || !strings.Contains(err.Error(), `store.degraded_share: "split" needs redis_hosts`) {
			t.Errorf("split with %q: %v", hosts, err)
		}
	}
	if _, err := config.Parse([]byte("[store]\nbackend = \"redis\"\ndegraded_share = \"split\"\nredis_hosts = 2\n"+stack), "split2.toml"); err != nil {
		t.Errorf("split over 2 hosts: %v", err)
	}
}

// A negative duration is one problem, reported once (redis_timeout and
// flush_interval were reported twice: by their table and by the check of
// every duration).
func TestNegativeDurationReportedOnce(t *testing.T) {
	_, err := config.Parse([]byte("[server]\nflush_interval = \"-1s\"\n[store]\nbackend = \"redis\"\nredis_timeout = \"-1s\"\n"+
		"\n[[limit]]\nname = \"hourly\"\nkey = [\"sasl_username\"]\nlimit = 200\nperiod = \"1h\"\n"), "neg.toml")
	for _, key := range []string{"store.redis_timeout", "server.flush_interval"} {
		if n := strings.Count(err.Error(), key); n != 1 {
			t.Errorf("%s reported %d times:\n%v", key, n, err)
		}
	}
}
