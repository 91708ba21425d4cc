package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
// the local one): one address for a standalone Redis, several for a
// Redis Cluster.
func storeTable(backend string, redisAddrs []string) string {
	if backend != backendRedis {
		return ""
	}
	q := make([]string, len(redisAddrs))
	for i, a := range redisAddrs {
		q[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("\n[store]\nbackend = \"redis\"\nredis_addrs = [%s]\nredis_timeout = \"200ms\"\non_redis_error = \"local\"\n",
		strings.Join(q, ", "))
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
	if err := waitRedis(ctx, c); err != nil {
		c.stop(time.Second)
		return nil, err
	}
	return c, nil
}

// waitRedis waits (at most 10 s) until the redis-server c answers INFO.
func waitRedis(ctx context.Context, c *child) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := redisInfo(c.addr, "server"); err == nil {
			return nil
		}
		if time.Now().After(deadline) || c.exited() || ctx.Err() != nil {
			return fmt.Errorf("redis-server on %s did not answer%s", c.addr, c.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startRedisCluster runs n redis-servers (from PATH) as the masters of a
// Redis Cluster without replicas, joined with `redis-cli --cluster
// create`, each on free loopback ports with its files in its own
// directory under dir and no persistence, and waits until every node says
// cluster_state:ok. They are restricted to cpus unless that is nil.
func startRedisCluster(ctx context.Context, dir string, n int, cpus []int) ([]*child, error) {
	var nodes []*child
	fail := func(err error) ([]*child, error) {
		for _, c := range nodes {
			c.stop(time.Second)
		}
		return nil, err
	}
	create := []string{"--cluster", "create"}
	for i := range n {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return fail(err)
		}
		bus, err := freeLoopbackAddr()
		if err != nil {
			return fail(err)
		}
		_, port, _ := net.SplitHostPort(addr)
		_, busPort, _ := net.SplitHostPort(bus)
		nd := filepath.Join(dir, "redis-"+strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o700); err != nil {
			return fail(err)
		}
		log := filepath.Join(nd, "redis.log")
		cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", nd,
			"--save", "", "--appendonly", "no", "--logfile", log,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-port", busPort,
			"--cluster-node-timeout", "2000")
		c, err := startChild("redis-server", cmd, log, cpus)
		if err != nil {
			return fail(err)
		}
		c.addr = addr
		nodes = append(nodes, c)
		if err := waitRedis(ctx, c); err != nil {
			return fail(err)
		}
		create = append(create, addr)
	}
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", create...).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("redis-cli %s: %w\n%s", strings.Join(create, " "), err, out))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, c := range nodes {
			if m, err := redisInfo(c.addr, "cluster"); err != nil || m["cluster_enabled"] != "1" {
				ok = false
				break
			}
			if v, err := redisCommand(c.addr, "CLUSTER", "INFO"); err != nil || !strings.Contains(v, "cluster_state:ok") {
				ok = false
				break
			}
		}
		if ok {
			return nodes, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fail(fmt.Errorf("redis cluster of %d masters: cluster_state not ok after 30s", n))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// redisMasters returns the addresses of the masters holding data among
// the Redis at addrs: the one server, or every master of the cluster the
// first answering address belongs to (CLUSTER NODES), in the order given
// and then as the cluster lists them.
func redisMasters(addrs []string) ([]string, error) {
	var firstErr error
	for _, a := range addrs {
		m, err := redisInfo(a, "cluster")
		if err != nil {
			firstErr = err
			continue
		}
		if m["cluster_enabled"] != "1" {
			return []string{a}, nil
		}
		nodes, err := redisCommand(a, "CLUSTER", "NODES")
		if err != nil {
			return nil, err
		}
		var found []string
		// <id> <ip:port@cport> <flags> <master> ... per line.
		for l := range strings.SplitSeq(nodes, "\n") {
			f := strings.Fields(l)
			if len(f) < 3 || !slices.Contains(strings.Split(f[2], ","), "master") || slices.Contains(strings.Split(f[2], ","), "fail") {
				continue
			}
			hp, _, _ := strings.Cut(f[1], "@")
			found = append(found, hp)
		}
		out := make([]string, 0, len(found))
		for _, g := range addrs {
			if slices.Contains(found, g) {
				out = append(out, g)
			}
		}
		for _, f := range found {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
		return out, nil
	}
	return nil, firstErr
}

// redisCommand sends one command to the Redis at addr and returns its
// answer, which must be a bulk string.
func redisCommand(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(head, "$") {
		return "", fmt.Errorf("%s answered %q", args[0], strings.TrimSpace(head))
	}
	n, err := strconv.Atoi(strings.TrimSpace(head[1:]))
	if err != nil {
		return "", err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// redisInfo returns the fields of INFO section from the Redis at addr.
func redisInfo(addr, section string) (map[string]string, error) {
	body, err := redisCommand(addr, "INFO", section)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for l := range strings.SplitSeq(body, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// redisMemory is the used_memory (bytes) and key count of the Redis
// masters at addrs, summed.
func redisMemory(addrs []string) (used, keys int64, err error) {
	for _, addr := range addrs {
		m, err := redisInfo(addr, "memory")
		if err != nil {
			return 0, 0, err
		}
		u, _ := strconv.ParseInt(m["used_memory"], 10, 64)
		used += u
		ks, err := redisInfo(addr, "keyspace")
		if err != nil {
			return 0, 0, err
		}
		// db0:keys=N,expires=N,avg_ttl=N
		for f := range strings.SplitSeq(ks["db0"], ",") {
			if v, ok := strings.CutPrefix(f, "keys="); ok {
				k, _ := strconv.ParseInt(v, 10, 64)
				keys += k
			}
		}
	}
	return used, keys, nil
}

// nodeCost is what one Redis master spent: the decision script's calls
// and their time (INFO commandstats, cmdstat_evalsha; µs) and its CPU
// time (INFO cpu, user + system; s).
type nodeCost struct {
	addr        string
	calls, usec float64
	cpu         float64
}

// redisCost is a snapshot of what the Redis masters spent (their sum, and
// each node's in nodes), and the requests the daemon had answered; or a
// sum of differences of snapshots (add), with the wall time. perMessage,
// if set, is the policy requests of one message (RCPTs + END-OF-MESSAGE),
// for the cost per message.
type redisCost struct {
	calls, usec float64
	cpu         float64
	nodes       []nodeCost
	requests    int64
	at          time.Time
	wall        time.Duration
	perMessage  int
}

// snapshotNode reads one master's counters.
func snapshotNode(addr string) (nodeCost, error) {
	n := nodeCost{addr: addr}
	cs, err := redisInfo(addr, "commandstats")
	if err != nil {
		return n, err
	}
	// calls=N,usec=N,usec_per_call=N,...
	for f := range strings.SplitSeq(cs["cmdstat_evalsha"], ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			n.calls, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(f, "usec="); ok {
			n.usec, _ = strconv.ParseFloat(v, 64)
		}
	}
	n.cpu, err = nodeCPU(addr)
	return n, err
}

// nodeCPU is the CPU time (s) the Redis at addr has used: INFO cpu,
// used_cpu_user + used_cpu_sys.
func nodeCPU(addr string) (float64, error) {
	cpu, err := redisInfo(addr, "cpu")
	if err != nil {
		return 0, err
	}
	u, _ := strconv.ParseFloat(cpu["used_cpu_user"], 64)
	sy, _ := strconv.ParseFloat(cpu["used_cpu_sys"], 64)
	return u + sy, nil
}

// redisCPU is the CPU time (s) the Redis masters at addrs have used,
// summed.
func redisCPU(addrs []string) (float64, error) {
	var sum float64
	for _, a := range addrs {
		c, err := nodeCPU(a)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// snapshotRedisCost reads the counters of the Redis masters at addrs and
// the daemon's request count (status on its admin socket).
func snapshotRedisCost(ctx context.Context, addrs []string, adminSocket string) (redisCost, error) {
	var c redisCost
	for _, a := range addrs {
		n, err := snapshotNode(a)
		if err != nil {
			return c, err
		}
		c.nodes = append(c.nodes, n)
		c.calls += n.calls
		c.usec += n.usec
		c.cpu += n.cpu
	}
	var err error
	if _, c.requests, err = daemonStatus(ctx, adminSocket); err != nil {
		return c, err
	}
	c.at = time.Now()
	return c, nil
}

// add adds the difference between the snapshots after and before to c
// (node by node when both list the same nodes).
func (c *redisCost) add(after, before redisCost) {
	c.calls += after.calls - before.calls
	c.usec += after.usec - before.usec
	c.cpu += after.cpu - before.cpu
	c.requests += after.requests - before.requests
	c.wall += after.at.Sub(before.at)
	if len(after.nodes) != len(before.nodes) {
		return
	}
	if len(c.nodes) == 0 {
		c.nodes = make([]nodeCost, len(after.nodes))
		for i := range after.nodes {
			c.nodes[i].addr = after.nodes[i].addr
		}
	}
	if len(c.nodes) != len(after.nodes) {
		return
	}
	for i := range c.nodes {
		c.nodes[i].calls += after.nodes[i].calls - before.nodes[i].calls
		c.nodes[i].usec += after.nodes[i].usec - before.nodes[i].usec
		c.nodes[i].cpu += after.nodes[i].cpu - before.nodes[i].cpu
	}
}

// CPUPerMessage is Redis's CPU per message in µs over the sum c (all
// masters' CPU over the daemon's requests, perMessage requests a
// message); ok is false without perMessage or requests.
func (c redisCost) CPUPerMessage() (usec float64, ok bool) {
	if c.perMessage <= 0 || c.requests <= 0 {
		return 0, false
	}
	return c.cpu * 1e6 / float64(c.requests) * float64(c.perMessage), true
}

// MessageRate is the daemon's messages a second over the sum c (0
// without perMessage or wall time).
func (c redisCost) MessageRate() float64 {
	if c.perMessage <= 0 || c.wall <= 0 {
		return 0
	}
	return float64(c.requests) / float64(c.perMessage) / c.wall.Seconds()
}

// describe says what Redis spent over the sum c: script calls a second,
// policy requests answered per call (END-OF-MESSAGE requests, which ask
// Redis nothing after a counted RCPT, included), the script's time per
// call and its share of the wall time of the daemon's runs (how busy
// Redis's one thread was deciding), and Redis's CPU per policy request
// (and per message, with perMessage); with several masters the same per
// node, then the total.
func (c redisCost) describe() string {
	wall := c.wall.Seconds()
	if c.calls <= 0 || c.requests <= 0 || wall <= 0 {
		return "redis: no script calls measured"
	}
	reqs := float64(c.requests)
	perMsg := ""
	if m, ok := c.CPUPerMessage(); ok {
		perMsg = fmt.Sprintf(", %.1f µs per message of %d requests", m, c.perMessage)
	}
	total := fmt.Sprintf("redis: %.0f script calls/s, %.1f policy requests answered per call, %.0f µs per call (the script busy %.0f%% of the time), Redis CPU %.1f µs per request%s (INFO commandstats, INFO cpu)",
		c.calls/wall, reqs/c.calls, c.usec/c.calls, 100*c.usec/1e6/wall, c.cpu*1e6/reqs, perMsg)
	if len(c.nodes) < 2 {
		return total
	}
	var b strings.Builder
	for _, n := range c.nodes {
		perCall := 0.0
		if n.calls > 0 {
			perCall = n.usec / n.calls
		}
		perMsg := ""
		if c.perMessage > 0 {
			perMsg = fmt.Sprintf(", %.1f µs per message", n.cpu*1e6/reqs*float64(c.perMessage))
		}
		fmt.Fprintf(&b, "redis node %s: %.0f script calls/s, %.0f µs per call, Redis CPU %.1f µs per request%s\n",
			n.addr, n.calls/wall, perCall, n.cpu*1e6/reqs, perMsg)
	}
	b.WriteString("total of " + strconv.Itoa(len(c.nodes)) + " masters: " + strings.TrimPrefix(total, "redis: "))
	return b.String()
}
