//go:build integration

package main

import (
	"context"
	"testing"
	"time"
)

// TestRedisFloorMeasuresStandalone: the Redis floor runs against a real
// redis-server, every call is answered, and Redis's CPU per message is
// positive and matches the EVALSHA calls Redis counted.
func TestRedisFloorMeasuresStandalone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := startRedis(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop(5 * time.Second)
	checkRedisFloor(ctx, t, []string{r.addr}, []string{r.addr})
}

// TestRedisFloorMeasuresCluster: on a real 3-master Cluster the floor's
// calls, keyed by the messages' rate keys, reach every master, and its
// CPU per message is summed over them.
func TestRedisFloorMeasuresCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes, err := startRedisCluster(ctx, t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, n := range nodes {
		defer n.stop(5 * time.Second)
		addrs = append(addrs, n.addr)
	}
	masters, err := redisMasters(addrs)
	if err != nil || len(masters) != 3 {
		t.Fatalf("masters %q, %v", masters, err)
	}
	checkRedisFloor(ctx, t, addrs, masters)
}

// checkRedisFloor runs the floor briefly on the Redis at addrs and checks
// what it measured against each master's counters.
func checkRedisFloor(ctx context.Context, t *testing.T, addrs, masters []string) {
	t.Helper()
	before := make([]nodeCost, len(masters))
	for i, m := range masters {
		var err error
		if before[i], err = snapshotNode(m); err != nil {
			t.Fatal(err)
		}
	}
	res, err := runRedisFloor(ctx, redisFloorSpec{Addrs: addrs, Masters: masters, Prefix: "ratelimitd:", Conns: 8, Keys: 1000,
		Pick: pickRandom, Seed: 1, Warmup: 100 * time.Millisecond, Duration: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 {
		t.Fatalf("%d calls failed, first: %v", res.Errors, res.FirstErr)
	}
	usec, ok := res.CPUPerMessage()
	if !ok || usec <= 0 || res.Elapsed < 500*time.Millisecond {
		t.Fatalf("floor measured %+v: %.2f µs per message, ok %v", res, usec, ok)
	}
	var calls float64
	for i, m := range masters {
		after, err := snapshotNode(m)
		if err != nil {
			t.Fatal(err)
		}
		n := after.calls - before[i].calls
		if n <= 0 {
			t.Errorf("master %s counted no EVALSHA", m)
		}
		calls += n
	}
	// Redis counts the warm-up's calls too, and those in flight at the
	// window's edges.
	if calls < float64(res.Messages) {
		t.Errorf("Redis counted %.0f EVALSHA calls, the floor %d messages", calls, res.Messages)
	}
	t.Logf("redis floor over %d masters: %.1f µs Redis CPU per message, %d messages in %s", len(masters), usec, res.Messages, res.Elapsed)

	// Paced, the callers together send no more than the rate (a caller
	// that falls behind sends at once, at most one call early).
	const rate = 1000
	res, err = runRedisFloor(ctx, redisFloorSpec{Addrs: addrs, Masters: masters, Prefix: "ratelimitd:", Conns: 8, Keys: 1000,
		Pick: pickRoundRobin, Seed: 1, Warmup: 100 * time.Millisecond, Duration: 500 * time.Millisecond, Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	usec, ok = res.CPUPerMessage()
	if res.Errors != 0 || !ok || usec <= 0 || float64(res.Messages) > rate*res.Elapsed.Seconds()+3*8 {
		t.Fatalf("paced to %d messages/s: %+v, %.2f µs per message", rate, res, usec)
	}
	t.Logf("paced to %d messages/s: %.1f µs Redis CPU per message, %d messages in %s", rate, usec, res.Messages, res.Elapsed)
}
