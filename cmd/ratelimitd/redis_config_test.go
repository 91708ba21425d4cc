package main

import (
	"fmt"
	"strings"
	"testing"
)

// redisConfig is the [store] table and a leaky 20/hour limit per SASL user.
func redisConfig(addr, onError string) string {
	return fmt.Sprintf(`
[store]
backend = "redis"
redis_addrs = [%q]
redis_timeout = "2s"
on_redis_error = %q
key_prefix = "it:"

[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 20
period = "1h"
mode = "leaky"
action = "defer"
`, addr, onError)
}

// TestRedisTimeoutChecked: `config check` refuses a redis_timeout at or
// above the request timeout (a hung Redis would leave requests to the
// MTA's own timeout, on_redis_error never applied) and says why.
func TestRedisTimeoutChecked(t *testing.T) {
	cfg := strings.Replace(redisConfig("127.0.0.1:6379", "local"), `redis_timeout = "2s"`, `redis_timeout = "30s"`, 1)
	path := writeConfig(t, t.TempDir(), fmt.Sprintf("127.0.0.1:%d", freePort(t)), cfg)
	out, err := cli(t, "--config", path, "config", "check")
	if err == nil || !strings.Contains(out, "redis_timeout") || !strings.Contains(out, "request_timeout") ||
		!strings.Contains(out, "smtpd_policy_service_timeout") {
		t.Fatalf("config check with redis_timeout = 30s: %v\n%s", err, out)
	}
}
