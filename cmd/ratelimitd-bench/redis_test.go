package main

import (
	"strings"
	"testing"
	"time"
)

// TestRedisCostDescribe: the Redis line sums the cells' differences and
// divides by the right counts: calls per second of the cells' wall time,
// requests per call, µs per call, the script's busy share and Redis's CPU
// per request.
func TestRedisCostDescribe(t *testing.T) {
	t0 := time.Unix(1_790_000_000, 0)
	var c redisCost
	// Two cells of 2 s each: 2,000 calls, 40,000 requests, 0.8 s of
	// script time, 0.36 s of Redis CPU in all.
	c.add(redisCost{calls: 1500, usec: 500_000, cpu: 10.2, requests: 30_000, at: t0.Add(2 * time.Second)},
		redisCost{calls: 500, usec: 100_000, cpu: 10, requests: 10_000, at: t0})
	c.add(redisCost{calls: 3000, usec: 1_000_000, cpu: 20.16, requests: 60_000, at: t0.Add(12 * time.Second)},
		redisCost{calls: 2000, usec: 600_000, cpu: 20, requests: 40_000, at: t0.Add(10 * time.Second)})
	got := c.describe()
	for _, want := range []string{"500 script calls/s", "20.0 policy requests answered per call", "400 µs per call",
		"busy 20% of the time", "Redis CPU 9.0 µs per request"} {
		if !strings.Contains(got, want) {
			t.Errorf("describe() = %q, want it to contain %q", got, want)
		}
	}
	if got := (redisCost{}).describe(); !strings.Contains(got, "no script calls") {
		t.Errorf("describe() with nothing measured = %q", got)
	}
}
