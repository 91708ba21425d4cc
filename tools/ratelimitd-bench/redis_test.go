package main

import (
	"io"
	"math"
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

// TestRedisCostPerNode: with several masters the Redis line gives each
// node's calls and CPU per request and message, then the total over the
// nodes, with the requests per script call of all of them.
func TestRedisCostPerNode(t *testing.T) {
	t0 := time.Unix(1_790_000_000, 0)
	before := redisCost{calls: 300, usec: 0, cpu: 3, requests: 0, at: t0, nodes: []nodeCost{
		{addr: "a:1", calls: 100, cpu: 1}, {addr: "b:2", calls: 200, cpu: 2}}}
	// 2 s: node a 1,000 calls and 0.1 s of CPU, node b 3,000 and 0.3 s;
	// 40,000 requests (20,000 messages of 2).
	after := redisCost{calls: 4300, usec: 400_000, cpu: 3.4, requests: 40_000, at: t0.Add(2 * time.Second), nodes: []nodeCost{
		{addr: "a:1", calls: 1100, usec: 100_000, cpu: 1.1}, {addr: "b:2", calls: 3200, usec: 300_000, cpu: 2.3}}}
	c := redisCost{perMessage: 2}
	c.add(after, before)
	got := c.describe()
	for _, want := range []string{
		"redis node a:1: 500 script calls/s, 100 µs per call, Redis CPU 2.5 µs per request, 5.0 µs per message",
		"redis node b:2: 1500 script calls/s, 100 µs per call, Redis CPU 7.5 µs per request, 15.0 µs per message",
		"total of 2 masters: 2000 script calls/s, 10.0 policy requests answered per call",
		"Redis CPU 10.0 µs per request, 20.0 µs per message of 2 requests"} {
		if !strings.Contains(got, want) {
			t.Errorf("describe() = %q, want it to contain %q", got, want)
		}
	}
}

// TestParseRedisFlags: --redis-addrs takes a list, --redis-cluster a
// number of masters, and neither goes without the Redis backend.
func TestParseRedisFlags(t *testing.T) {
	o, err := parseFlags([]string{"--backend", "redis", "--redis-addrs", "127.0.0.1:7000, 127.0.0.1:7001,127.0.0.1:7002"}, io.Discard)
	if err != nil || len(o.redisAddrs) != 3 || o.redisAddrs[1] != "127.0.0.1:7001" {
		t.Fatalf("--redis-addrs: %+v, %v", o, err)
	}
	if o, err = parseFlags([]string{"--backend", "redis", "--redis-cluster", "3"}, io.Discard); err != nil || o.cluster != 3 {
		t.Fatalf("--redis-cluster 3: %v", err)
	}
	for _, args := range [][]string{{"--redis-cluster", "3"}, {"--backend", "redis", "--redis-cluster", "2"},
		{"--backend", "redis", "--redis-cluster", "3", "--redis-addrs", "a:1"}, {"--redis-addrs", "a:1"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted", args)
		}
	}
}

// TestFloorLine: the Redis floor's line divides each side's Redis CPU by
// its messages (the daemon's requests over the requests of a message)
// and gives both message rates and the ratio.
func TestFloorLine(t *testing.T) {
	t0 := time.Unix(1_790_000_000, 0)
	// The floor: 200,000 messages in 2 s, 1.2 s of Redis CPU: 6.0 µs each.
	floor := redisFloorResult{Messages: 200_000, CPU: 1.2, Elapsed: 2 * time.Second}
	// The daemon: 100,000 requests of 2 per message in 2 s, 0.24 s of
	// Redis CPU: 4.8 µs per message.
	d := redisCost{perMessage: 2}
	d.add(redisCost{cpu: 10.24, requests: 150_000, at: t0.Add(2 * time.Second)}, redisCost{cpu: 10, requests: 50_000, at: t0})
	line, r := floorLine(targetConns, targetKeys, 1, "", floor, d)
	want := "redis floor C=64 K=100000: one empty EVALSHA per message: 6.0 µs Redis CPU per message (100,000 messages/s); " +
		"ratelimitd: 4.8 µs per message (25,000 messages/s), Y/X = 0.80×"
	if line != want || math.Abs(r-0.8) > 1e-9 {
		t.Errorf("floorLine = %q, %v\nwant %q, 0.8", line, r, want)
	}
	line, _ = floorLine(8, 1000, 3, "paced to ratelimitd's messages/s", floor, d)
	if !strings.HasPrefix(line, "redis floor C=8 K=1000 (3 masters) paced to ratelimitd's messages/s: one empty EVALSHA") {
		t.Errorf("paced, 3 masters: %q", line)
	}
	if line, r := floorLine(targetConns, targetKeys, 1, "", redisFloorResult{}, d); !strings.Contains(line, "not measured") || r != 0 {
		t.Errorf("no floor measured: %q, %v", line, r)
	}
}

// TestFloorTarget: the target is checked only at C=64, K=100,000: at
// most 1.0 times the floor on one server, 1.5 times on a Cluster.
func TestFloorTarget(t *testing.T) {
	for _, tc := range []struct {
		conns, keys, masters int
		ratio                float64
		want                 string
		missed               bool
	}{
		{64, 100_000, 1, 0.8, "redis floor target C=64 K=100000: ratelimitd/floor 0.80 <= 1.0 PASS", false},
		{64, 100_000, 1, 1.4, "redis floor target C=64 K=100000: ratelimitd/floor 1.40 <= 1.0 MISS", true},
		{64, 100_000, 3, 1.4, "redis floor target C=64 K=100000: ratelimitd/floor 1.40 <= 1.5 PASS", false},
		{64, 100_000, 3, 1.5001, "redis floor target C=64 K=100000: ratelimitd/floor 1.5001 <= 1.5 MISS", true},
		{8, 100_000, 1, 4, "", false},
		{64, 100_000, 1, 0, "", false},
	} {
		line, missed := floorTarget(tc.conns, tc.keys, tc.masters, tc.ratio)
		if line != tc.want || missed != tc.missed {
			t.Errorf("floorTarget(%d, %d, %d, %v) = %q, %v; want %q, %v", tc.conns, tc.keys, tc.masters, tc.ratio,
				line, missed, tc.want, tc.missed)
		}
	}
}

// TestFloorKey: the floor's key of a user is the daemon's Redis key of
// its sasl_username rate key, with the key in the hash tag.
func TestFloorKey(t *testing.T) {
	if got, want := floorKey("ratelimitd:", 123), "ratelimitd:{user0000123@example.org}"; got != want {
		t.Errorf("floorKey = %q, want %q", got, want)
	}
}

// TestParseNoRedisFloor: the Redis floor is measured unless
// --no-redis-floor, and --no-floor leaves it on.
func TestParseNoRedisFloor(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{[]string{"--backend", "redis"}, false}, {[]string{"--backend", "redis", "--no-floor"}, false},
		{[]string{"--backend", "redis", "--no-redis-floor"}, true}} {
		o, err := parseFlags(tc.args, io.Discard)
		if err != nil || o.noRedisFloor != tc.want {
			t.Errorf("parseFlags(%q): noRedisFloor %v, %v; want %v", tc.args, o.noRedisFloor, err, tc.want)
		}
	}
}
