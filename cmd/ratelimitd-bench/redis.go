package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Backends of --backend.
const (
	backendLocal = "local"
	backendRedis = "redis"
)

// Done-when targets of the Redis backend (issue "Shared rate state"): at
// C=64, K=100,000, at least half the floor's throughput and p99 <= 5ms.
const (
	targetRateRedis = 0.50
	targetP99Redis  = 5 * time.Millisecond
)

// storeTable is the daemon's [store] table for the chosen backend ("" for
// the local one).
func storeTable(backend, redisAddr string) string {
	if backend != backendRedis {
		return ""
	}
	return fmt.Sprintf("\n[store]\nbackend = \"redis\"\nredis_addrs = [%s]\nredis_timeout = \"200ms\"\non_redis_error = \"local\"\n",
		strconv.Quote(redisAddr))
}

// startRedis runs a redis-server (from PATH) on a free loopback port with
// its files in dir, no persistence: the store the daemon shares. It is
// restricted to cpus unless that is nil (--pin).
func startRedis(ctx context.Context, dir string, cpus []int) (*child, error) {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	log := filepath.Join(dir, "redis.log")
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", dir,
		"--save", "", "--appendonly", "no", "--logfile", log)
	c, err := startChild("redis-server", cmd, log, cpus)
	if err != nil {
		return nil, err
	}
	c.addr = addr
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := redisInfo(addr, "server"); err == nil {
			return c, nil
		}
		if time.Now().After(deadline) || c.exited() || ctx.Err() != nil {
			c.stop(time.Second)
			return nil, fmt.Errorf("redis-server on %s did not answer%s", addr, c.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisInfo returns the fields of INFO section from the Redis at addr.
func redisInfo(addr, section string) (map[string]string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n", len(section), section)
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(head, "$") {
		return nil, fmt.Errorf("INFO answered %q", strings.TrimSpace(head))
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return nil, err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for l := range strings.SplitSeq(string(body), "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// redisMemory is Redis's used_memory (bytes) and key count.
func redisMemory(addr string) (used, keys int64, err error) {
	m, err := redisInfo(addr, "memory")
	if err != nil {
		return 0, 0, err
	}
	used, _ = strconv.ParseInt(m["used_memory"], 10, 64)
	ks, err := redisInfo(addr, "keyspace")
	if err != nil {
		return 0, 0, err
	}
	// db0:keys=N,expires=N,avg_ttl=N
	for f := range strings.SplitSeq(ks["db0"], ",") {
		if v, ok := strings.CutPrefix(f, "keys="); ok {
			keys, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return used, keys, nil
}

// redisCost is a snapshot of what Redis spent: the decision script's calls
// and their time (INFO commandstats, cmdstat_evalsha; µs), its CPU time
// (INFO cpu, user + system; s), and the requests the daemon had answered;
// or a sum of differences of snapshots (add), with the wall time.
type redisCost struct {
	calls, usec float64
	cpu         float64
	requests    int64
	at          time.Time
	wall        time.Duration
}

// snapshotRedisCost reads Redis's counters at addr and the daemon's
// request count (status on its admin socket).
func snapshotRedisCost(ctx context.Context, addr, adminSocket string) (redisCost, error) {
	var c redisCost
	cs, err := redisInfo(addr, "commandstats")
	if err != nil {
		return c, err
	}
	// calls=N,usec=N,usec_per_call=N,...
	for f := range strings.SplitSeq(cs["cmdstat_evalsha"], ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			c.calls, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(f, "usec="); ok {
			c.usec, _ = strconv.ParseFloat(v, 64)
		}
	}
	cpu, err := redisInfo(addr, "cpu")
	if err != nil {
		return c, err
	}
	u, _ := strconv.ParseFloat(cpu["used_cpu_user"], 64)
	sy, _ := strconv.ParseFloat(cpu["used_cpu_sys"], 64)
	c.cpu = u + sy
	if _, c.requests, err = daemonStatus(ctx, adminSocket); err != nil {
		return c, err
	}
	c.at = time.Now()
	return c, nil
}

// add adds the difference between the snapshots after and before to c.
func (c *redisCost) add(after, before redisCost) {
	c.calls += after.calls - before.calls
	c.usec += after.usec - before.usec
	c.cpu += after.cpu - before.cpu
	c.requests += after.requests - before.requests
	c.wall += after.at.Sub(before.at)
}

// describe says what Redis spent over the sum c: script calls a second,
// policy requests answered per call (END-OF-MESSAGE requests, which ask
// Redis nothing after a counted RCPT, included), the script's time per
// call and its share of the wall time (how busy Redis's one thread was
// deciding; the floor's runs are in the wall time too), and Redis's CPU
// per policy request.
func (c redisCost) describe() string {
	wall := c.wall.Seconds()
	if c.calls <= 0 || c.requests <= 0 || wall <= 0 {
		return "redis: no script calls measured"
	}
	reqs := float64(c.requests)
	return fmt.Sprintf("redis: %.0f script calls/s, %.1f policy requests answered per call, %.0f µs per call (the script busy %.0f%% of the time, floor runs included), Redis CPU %.1f µs per request (INFO commandstats, INFO cpu)",
		c.calls/wall, reqs/c.calls, c.usec/c.calls, 100*c.usec/1e6/wall, c.cpu*1e6/reqs)
}
