// Command ratelimitd-bench is the load generator of `make bench`. It speaks
// the Postfix policy delegation protocol (SMTPD_POLICY_README) to a policy
// server over C persistent connections (TCP and a unix socket), each
// synchronous like a Postfix smtpd process, with realistic 31-attribute
// RCPT and END-OF-MESSAGE requests from K distinct SASL users, and prints
// requests/s, p50/p99 latency and the server's CPU time per request (from
// /proc/PID/stat) for every (listener, C, K).
//
// Each cell is measured on two servers, in alternating runs (--rounds) so
// that both see the same background load: ratelimitd (started by the
// program with the embedded default limits, 200/hour leaky + 1000/day
// strict per sasl_username, and BoltDB persistence flushed every second)
// and the protocol floor, a separate process running the same mta/postfix
// server with a Decider that answers DUNNO without deciding. The ratio of
// the two is what ratelimitd costs over the protocol. With --rss-users N
// it then sends one END-OF-MESSAGE request for each of N distinct users
// and prints the daemon's resident memory and the size of its database,
// optionally again after a restart (--rss-restart).
//
// With --backend redis the daemon keeps its rate state in Redis: a
// redis-server the program starts, a Redis Cluster of N masters it starts
// (--redis-cluster N), or the Redis at --redis-addrs (one address, or
// several of an existing Cluster). After the table it prints what Redis
// spent over the measured cells, from Redis's own counters (INFO
// commandstats and INFO cpu): the decision script's calls a second and
// time per call, the policy requests answered per call, and Redis's CPU
// per request and per message, for each master and in total, each read
// around the daemon's runs alone.
//
// In the same run, after each K's cells and for each C, it measures the
// Redis floor (unless --no-redis-floor; --no-floor is the DUNNO floor
// only): C callers send, for --duration after --warmup, one EVALSHA of an
// empty script per message through rueidis (automatic pipelining, as the
// daemon's client), with the message's rate key (the daemon's Redis key
// of a random user of K, PREFIX{user}) as KEYS[1] so that a Cluster runs
// it on that key's master. Redis's CPU per message there (INFO cpu,
// user + system, summed over the masters) is what one round trip per
// message costs Redis; the program prints the daemon's Redis CPU per
// message at the same C and K against it. Unpaced, the floor sends many
// times the daemon's messages a second and Redis reads deep pipelines,
// so a second run, paced to the daemon's messages a second, gives the
// floor at the daemon's load; the target at C=64, K=100,000 is checked
// against that one.
//
// On a machine with few CPUs the load generator and the server share
// them, and the kernel time-slicing the two makes most of the p99: --pin
// (Linux) keeps the load generator on one CPU and the servers on the
// others, which measures the server's own latency; make bench does not
// pin.
//
// Everything runs on 127.0.0.1 and every run is bounded in time; the
// program stops the servers it started when it ends or is interrupted.
//
// Usage (in tools/):
//
//	go run ./ratelimitd-bench [flags]
//	go run ./ratelimitd-bench --conns 64 --keys 100000 --duration 10s
//	go run ./ratelimitd-bench --rss-users 1000000 --rss-restart
//	go run ./ratelimitd-bench --backend redis --redis-cluster 3 --conns 64 --keys 100000 --listeners tcp --no-floor
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) >= 3 && os.Args[1] == floorServeFlag {
		os.Exit(serveFloor(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitTargetMiss  = 3 // --check and a done-when target missed
	exitInterrupted = 130
)

// Done-when targets of the benchmark issue, checked at C=64, K=100,000
// on each listener and after --rss-users 1,000,000.
const (
	targetConns     = 64
	targetKeys      = 100_000
	targetRate      = 0.90      // ratelimitd throughput / floor throughput, at least
	targetP99       = 1.2       // ratelimitd p99 / floor p99, at most
	targetCPU       = 1.2       // ratelimitd CPU per request / floor's, at most
	targetRSS       = 150 << 20 // daemon VmRSS after 1,000,000 users, at most
	targetRSSUsers  = 1_000_000
	rssConns        = 64
	defaultDuration = 2 * time.Second
)

// Listeners measured (--listeners).
const (
	listenTCP  = "tcp"
	listenUnix = "unix"
)

// run is the program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "ratelimitd-bench:", err)
		return exitUsage
	}
	b := &bench{o: o, out: stdout}
	code, err := b.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "ratelimitd-bench: interrupted")
			return exitInterrupted
		}
		fmt.Fprintln(stderr, "ratelimitd-bench:", err)
		return exitError
	}
	return code
}

// bench is one invocation of the program.
type bench struct {
	o      *options
	out    io.Writer
	dir    string
	floor  *child
	daemon *daemon
	redis  []*child // the redis-servers this program started, if any
	// redisNodes are the Redis masters whose counters are read: the
	// one server, or every master of the cluster.
	redisNodes []string
	rows       []row
	// redisTotal is what Redis spent over the daemon's runs (with the
	// Redis backend), redisCells the same per (C, K) with the Redis
	// floor of that (C, K).
	redisTotal redisCost
	redisCells []redisCell
}

// redisCell is what Redis spent over the daemon's runs of one (C, K), on
// every listener, and the Redis floor measured at the same C and K.
type redisCell struct {
	conns, keys int
	cost        redisCost
	// floor is the Redis floor sending as fast as it is answered,
	// paced the same floor paced to the daemon's messages a second.
	floor, paced     redisFloorResult
	floorOK, pacedOK bool
}

// row is one measured cell of one target.
type row struct {
	target   string
	listener string
	conns    int
	keys     int
	res      *result
	mem      memStatus
	memOK    bool
}

func (b *bench) printf(format string, a ...any) { fmt.Fprintf(b.out, format, a...) }

func (b *bench) run(ctx context.Context) (code int, err error) {
	o := b.o
	if b.dir, err = os.MkdirTemp("", "ratelimitd-bench-"); err != nil {
		return 0, err
	}
	defer func() {
		b.stopServers()
		if o.keep {
			b.printf("kept %s\n", b.dir)
		} else {
			os.RemoveAll(b.dir)
		}
	}()

	b.printf("ratelimitd-bench: %s %s/%s, %d CPUs, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.GOMAXPROCS(0))
	serverCPUs, err := b.pin()
	if err != nil {
		return 0, err
	}
	target, targetPID, err := b.startTarget(ctx, serverCPUs)
	if err != nil {
		return 0, err
	}
	if err := b.startFloorServer(ctx, serverCPUs); err != nil {
		return 0, err
	}
	b.printPlan()
	if err := b.measureCells(ctx, target, targetPID); err != nil {
		return 0, err
	}
	missed := b.printRatios()
	if b.measuresRedis() {
		b.printf("%s\n", b.redisTotal.describe())
		missed = b.printRedisFloors() || missed
		if st, err := daemonStatusOf(ctx, b.daemon.adminSocket()); err == nil {
			b.printf("redis backend: %s requests decided locally (Redis past redis_timeout, or degraded); 0 means every request was decided in Redis\n",
				thousands(st.localDecisions()))
		}
	}
	if o.rssUsers > 0 {
		m, err := b.rssPhase(ctx)
		if err != nil {
			return 0, err
		}
		missed = missed || m
	}
	if missed && o.check {
		return exitTargetMiss, nil
	}
	return exitOK, nil
}

// pin pins this program to one CPU with --pin and returns the CPUs for
// the servers it starts (nil without --pin).
func (b *bench) pin() ([]int, error) {
	if !b.o.pin {
		return nil, nil
	}
	gen, servers, err := pinPlan()
	if err != nil {
		return nil, err
	}
	if err := pinProcess(os.Getpid(), gen); err != nil {
		return nil, err
	}
	b.printf("pinned: load generator on CPU %s, servers on CPUs %s\n", cpuString(gen), cpuString(servers))
	return servers, nil
}

// startTarget starts the daemon (building it and its Redis if need be)
// unless --addr names the server to measure, and returns its address and
// process id.
func (b *bench) startTarget(ctx context.Context, serverCPUs []int) (target string, pid int, err error) {
	o := b.o
	if o.addr != "" {
		b.printf("target: %s (pid %d)\n", o.addr, o.pid)
		return o.addr, o.pid, nil
	}
	bin := o.daemonBin
	if bin == "" {
		b.printf("building ratelimitd ...\n")
		if bin, err = buildDaemon(ctx, b.dir); err != nil {
			return "", 0, err
		}
	}
	if err := b.redisServers(ctx, serverCPUs); err != nil {
		return "", 0, err
	}
	if b.daemon, err = newDaemon(bin, b.dir, o.logLevel, o.flush, storeTable(o.backend, o.redisAddrs), o.events); err != nil {
		return "", 0, err
	}
	b.daemon.env = o.daemonEnv
	b.daemon.cpus = serverCPUs
	took, err := b.daemon.start(ctx)
	if err != nil {
		return "", 0, err
	}
	b.printf("ratelimitd: pid %d on %s and %s, limits %s, state %s (flush_interval %s), log_level %s, store %s; ready in %s\n",
		b.daemon.pid(), b.daemon.addr, b.daemon.unixAddr, describeLimits(b.daemon.f), b.daemon.dbPath(), o.flush, o.logLevel, o.backend, round(took))
	if len(o.daemonEnv) > 0 {
		b.printf("ratelimitd environment: %s\n", strings.Join(o.daemonEnv, " "))
	}
	return b.daemon.addr, b.daemon.pid(), nil
}

// startFloorServer starts the DUNNO floor unless --no-floor.
func (b *bench) startFloorServer(ctx context.Context, serverCPUs []int) (err error) {
	if b.o.noFloor {
		return nil
	}
	unixPath := ""
	if slices.Contains(b.o.listeners, listenUnix) {
		unixPath = b.dir + "/floor.sock"
	}
	if b.floor, err = startFloor(ctx, b.dir+"/floor.log", unixPath, serverCPUs); err != nil {
		return err
	}
	b.printf("floor: pid %d on %s %s (mta/postfix.Server answering DUNNO without deciding)\n", b.floor.pid(),
		b.floor.addr, b.floor.unixAddr)
	return nil
}

// printPlan prints the load and the table's header.
func (b *bench) printPlan() {
	o := b.o
	limit := "duration " + o.duration.String()
	if o.requests > 0 {
		limit = fmt.Sprintf("%d requests or %s", o.requests, o.duration)
	}
	b.printf("load: per message %d RCPT + 1 END-OF-MESSAGE request (31 attributes), user %s over K; per cell and target %s\n",
		o.rcpts, o.pick, limit)
	b.printf("      in %d alternating runs, each after %s of warmup on fresh connections\n\n", o.rounds, o.warmup)
	b.printf("%-4s %-11s %5s %8s %10s %9s %9s %9s %9s %8s %6s %10s\n",
		"via", "target", "C", "K", "req/s", "p50", "p99", "p99.9", "CPU/req", "refused", "errors", "RSS")
}

// measureCells runs every cell (listener, C) of every K, after the
// prefill of K's users, then with the Redis backend the Redis floor of
// each (C, K) unless --no-redis-floor.
func (b *bench) measureCells(ctx context.Context, target string, targetPID int) error {
	o := b.o
	b.redisTotal = redisCost{perMessage: o.rcpts + 1}
	for _, k := range o.keys {
		if o.prefill {
			if err := b.prefillUsers(ctx, target, targetPID, k); err != nil {
				return err
			}
		}
		for _, l := range o.listeners {
			for _, c := range o.conns {
				if err := b.cell(ctx, l, c, k, target, targetPID); err != nil {
					return err
				}
			}
		}
		if !b.measuresRedis() || o.noRedisFloor {
			continue
		}
		for _, c := range o.conns {
			if err := b.redisFloor(ctx, c, k, targetPID); err != nil {
				return err
			}
		}
	}
	return nil
}

// measuresRedis reports whether Redis's counters are read: the Redis
// backend of a daemon this program started.
func (b *bench) measuresRedis() bool { return b.o.backend == backendRedis && b.daemon != nil }

// redisCell returns the entry of (conns, keys) in b.redisCells, adding
// it if need be; the pointer is valid until the next call.
func (b *bench) redisCell(conns, keys int) *redisCell {
	for i := range b.redisCells {
		if c := &b.redisCells[i]; c.conns == conns && c.keys == keys {
			return c
		}
	}
	b.redisCells = append(b.redisCells, redisCell{conns: conns, keys: keys, cost: redisCost{perMessage: b.o.rcpts + 1}})
	return &b.redisCells[len(b.redisCells)-1]
}

// redisFloor measures the Redis floor at (conns, keys) for --duration
// after --warmup, on the daemon's Redis, once the daemon is idle.
func (b *bench) redisFloor(ctx context.Context, conns, keys, targetPID int) error {
	b.waitQuiet(ctx, targetPID)
	o := b.o
	res, err := runRedisFloor(ctx, redisFloorSpec{Addrs: o.redisAddrs, Masters: b.redisNodes, Prefix: b.daemon.f.Store.KeyPrefix,
		Conns: conns, Keys: keys, Pick: o.pick, Seed: o.seed, Warmup: o.warmup, Duration: o.duration})
	if err != nil {
		return err
	}
	if res.Messages == 0 {
		return fmt.Errorf("redis floor C=%d K=%d: no call answered (%d failed, first: %v)", conns, keys, res.Errors, res.FirstErr)
	}
	c := b.redisCell(conns, keys)
	c.floor, c.floorOK = res, true
	rate := c.cost.MessageRate()
	if rate <= 0 {
		return nil
	}
	b.waitQuiet(ctx, targetPID)
	res, err = runRedisFloor(ctx, redisFloorSpec{Addrs: o.redisAddrs, Masters: b.redisNodes, Prefix: b.daemon.f.Store.KeyPrefix,
		Conns: conns, Keys: keys, Pick: o.pick, Seed: o.seed, Warmup: o.warmup, Duration: o.duration, Rate: rate})
	if err != nil {
		return err
	}
	c = b.redisCell(conns, keys)
	c.paced, c.pacedOK = res, res.Messages > 0
	return nil
}

// printRedisFloors prints, for each (C, K), the daemon's Redis CPU per
// message against the Redis floor's, unpaced and paced to the daemon's
// message rate, and checks the target on the paced one; it reports
// whether the target was missed.
func (b *bench) printRedisFloors() (missed bool) {
	masters := len(b.redisNodes)
	for _, c := range b.redisCells {
		if !c.floorOK {
			continue
		}
		line, _ := floorLine(c.conns, c.keys, masters, "", c.floor, c.cost)
		b.printf("%s\n", line)
		if !c.pacedOK {
			continue
		}
		line, r := floorLine(c.conns, c.keys, masters, "paced to ratelimitd's messages/s", c.paced, c.cost)
		b.printf("%s\n", line)
		if line, m := floorTarget(c.conns, c.keys, masters, r); line != "" {
			b.printf("%s\n", line)
			missed = missed || m
		}
	}
	return missed
}

// redisServers starts the Redis of the Redis backend unless --redis-addrs
// names one (a redis-server, or a cluster of --redis-cluster masters),
// restricted to cpus unless that is nil, and finds the masters whose
// counters are read.
func (b *bench) redisServers(ctx context.Context, cpus []int) error {
	o := b.o
	if o.backend != backendRedis {
		return nil
	}
	switch {
	case o.cluster > 0:
		nodes, err := startRedisCluster(ctx, b.dir, o.cluster, cpus)
		if err != nil {
			return err
		}
		b.redis = nodes
		for _, n := range nodes {
			o.redisAddrs = append(o.redisAddrs, n.addr)
		}
		b.printf("redis cluster: %d masters on %s (no replicas, no persistence)\n", len(nodes), strings.Join(o.redisAddrs, ", "))
	case len(o.redisAddrs) == 0:
		r, err := startRedis(ctx, b.dir, cpus)
		if err != nil {
			return err
		}
		b.redis = []*child{r}
		o.redisAddrs = []string{r.addr}
		b.printf("redis-server: pid %d on %s (no persistence)\n", r.pid(), r.addr)
	}
	nodes, err := redisMasters(o.redisAddrs)
	if err != nil {
		return fmt.Errorf("redis at %s: %w", strings.Join(o.redisAddrs, ","), err)
	}
	b.redisNodes = nodes
	if len(nodes) > 1 {
		b.printf("redis masters measured: %s\n", strings.Join(nodes, ", "))
	}
	return nil
}

// prefillUsers sends one END-OF-MESSAGE request for each of the users
// 0..keys-1 to the target over C=64 connections, unmeasured, then waits
// for the daemon's write-behind to settle. Users already sent by an
// earlier (smaller) K are sent again: one more message each, far below
// the default limits.
func (b *bench) prefillUsers(ctx context.Context, target string, targetPID, keys int) error {
	capDur := time.Duration(keys/2000+60) * time.Second
	res, err := runLoad(ctx, loadSpec{Addr: target, Conns: rssConns, Distinct: keys, Duration: capDur, Seed: b.o.seed})
	if err != nil {
		return fmt.Errorf("prefill of %d users: %w", keys, err)
	}
	if res.Errors > 0 {
		return fmt.Errorf("prefill of %d users: %d errors, first: %v", keys, res.Errors, res.FirstErr)
	}
	b.printf("prefill: %s users sent one message each to ratelimitd in %s (unmeasured)\n", thousands(int64(keys)), round(res.Elapsed))
	b.waitQuiet(ctx, targetPID)
	return nil
}

// waitQuiet waits (at most 15 s) until the process pid has been idle (at
// most one clock tick of CPU a second) for 1.2 s, longer than the
// daemon's flush interval.
func (b *bench) waitQuiet(ctx context.Context, pid int) {
	if _, ok := cpuTicks(pid); ok {
		waitSettled(ctx, pid, "", 1200*time.Millisecond, 15*time.Second)
	}
}

// cell measures the floor and the target at one (listener, C, K),
// alternating between them for --rounds rounds so that both see the same
// background load, and prints a row for each.
func (b *bench) cell(ctx context.Context, listener string, conns, keys int, target string, targetPID int) error {
	o := b.o
	type side struct {
		name string
		addr string
		pid  int
		res  result
	}
	if listener == listenUnix {
		target = b.daemon.unixAddr
	}
	sides := []*side{{name: "ratelimitd", addr: target, pid: targetPID}}
	if b.floor != nil {
		floorAddr := b.floor.addr
		if listener == listenUnix {
			floorAddr = b.floor.unixAddr
		}
		sides = []*side{{name: "floor", addr: floorAddr, pid: b.floor.pid()}, sides[0]}
	}
	per := o.duration / time.Duration(o.rounds)
	perReq := (o.requests + int64(o.rounds) - 1) / int64(o.rounds)
	for round := range o.rounds {
		for _, sd := range sides {
			if c := b.serverOf(sd.addr); c != nil && c.exited() {
				return fmt.Errorf("%s exited: %v%s", c.name, c.err, c.logTail())
			}
			if sd.name == "floor" {
				// The daemon's write-behind flush (and sweep) after
				// its run must not steal the floor's CPU.
				b.waitQuiet(ctx, targetPID)
			}
			spec := loadSpec{Addr: sd.addr, ServerPID: sd.pid, Conns: conns, Keys: keys, Pick: o.pick, Rcpts: o.rcpts,
				Warmup: o.warmup, Duration: per, MaxRequests: perReq, Seed: o.seed + uint64(round)}
			// Redis's counters are read around each of the daemon's
			// runs, so its cost is over the daemon's load alone.
			measure := sd.name == "ratelimitd" && b.measuresRedis()
			var before redisCost
			if measure {
				var err error
				if before, err = snapshotRedisCost(ctx, b.redisNodes, b.daemon.adminSocket()); err != nil {
					return fmt.Errorf("redis INFO: %w", err)
				}
			}
			res, err := runLoad(ctx, spec)
			if err != nil {
				return fmt.Errorf("%s C=%d K=%d: %w", sd.name, conns, keys, err)
			}
			sd.res.add(res)
			if measure {
				after, err := snapshotRedisCost(ctx, b.redisNodes, b.daemon.adminSocket())
				if err != nil {
					return fmt.Errorf("redis INFO: %w", err)
				}
				b.redisTotal.add(after, before)
				b.redisCell(conns, keys).cost.add(after, before)
			}
		}
	}
	for _, sd := range sides {
		r := row{target: sd.name, listener: listener, conns: conns, keys: keys, res: &sd.res}
		r.mem, r.memOK = readMem(sd.pid)
		b.rows = append(b.rows, r)
		res := r.res
		rss := "-"
		if r.memOK {
			rss = mib(r.mem.RSS)
		}
		refused := 0.0
		if res.Requests > 0 {
			refused = 100 * float64(res.Refused) / float64(res.Requests)
		}
		cpu := "-"
		if d, ok := res.CPUPerRequest(); ok {
			cpu = latency(d)
		}
		b.printf("%-4s %-11s %5d %8d %10s %9s %9s %9s %9s %7.1f%% %6d %10s\n", listener, sd.name, conns, keys,
			thousands(int64(res.Rate()+0.5)), latency(res.Hist.quantile(0.50)), latency(res.Hist.quantile(0.99)),
			latency(res.Hist.quantile(0.999)), cpu, refused, res.Errors, rss)
		if res.FirstErr != nil {
			b.printf("  first error: %v\n", res.FirstErr)
		}
	}
	return nil
}

func (b *bench) serverOf(addr string) *child {
	if b.floor != nil && (addr == b.floor.addr || addr == b.floor.unixAddr) {
		return b.floor
	}
	if b.daemon != nil && b.daemon.child != nil && (addr == b.daemon.addr || addr == b.daemon.unixAddr) {
		return b.daemon.child
	}
	return nil
}

// printRatios prints ratelimitd/floor per cell (throughput, p99 and
// server CPU per request) and checks the targets at C=64, K=100,000 on
// each listener; it reports whether a target was missed.
func (b *bench) printRatios() (missed bool) {
	if b.floor == nil {
		return false
	}
	b.printf("\n%-18s %-4s %5s %8s %11s %7s %8s\n", "ratelimitd/floor", "via", "C", "K", "throughput", "p99", "CPU/req")
	var floor *row
	var checks []string
	for i := range b.rows {
		r := &b.rows[i]
		if r.target == "floor" {
			floor = r
			continue
		}
		if floor == nil || floor.listener != r.listener || floor.conns != r.conns || floor.keys != r.keys {
			continue
		}
		tp := ratio(r.res.Rate(), floor.res.Rate())
		p99 := ratio(float64(r.res.Hist.quantile(0.99)), float64(floor.res.Hist.quantile(0.99)))
		rc, okR := r.res.CPUPerRequest()
		fc, okF := floor.res.CPUPerRequest()
		cpu, cpuText := 0.0, "-"
		if okR && okF && fc > 0 {
			cpu = float64(rc) / float64(fc)
			cpuText = fmt.Sprintf("%.2fx", cpu)
		}
		b.printf("%-18s %-4s %5d %8d %10.2fx %6.2fx %8s\n", "", r.listener, r.conns, r.keys, tp, p99, cpuText)
		if r.conns == targetConns && r.keys == targetKeys && b.o.backend == backendRedis {
			okTP, okP99 := tp >= targetRateRedis, r.res.Hist.quantile(0.99) <= targetP99Redis
			checks = append(checks, fmt.Sprintf("redis target %s C=%d K=%d: throughput %s >= %.2f %s; p99 %s <= %s %s",
				r.listener, targetConns, targetKeys, against(tp, targetRateRedis), targetRateRedis, verdict(okTP), latency(r.res.Hist.quantile(0.99)),
				targetP99Redis, verdict(okP99)))
			missed = missed || !okTP || !okP99
		} else if r.conns == targetConns && r.keys == targetKeys {
			okTP, okP99, okCPU := tp >= targetRate, p99 <= targetP99, cpu > 0 && cpu <= targetCPU
			cpuCheck := cpuText
			if cpu > 0 {
				cpuCheck = against(cpu, targetCPU) + "x"
			}
			checks = append(checks, fmt.Sprintf("target %s C=%d K=%d: throughput %s >= %.2f %s; p99 %sx <= %.1fx %s; CPU/req %s <= %.1fx %s",
				r.listener, targetConns, targetKeys, against(tp, targetRate), targetRate, verdict(okTP), against(p99, targetP99), targetP99, verdict(okP99),
				cpuCheck, targetCPU, verdict(okCPU)))
			missed = missed || !okTP || !okP99 || !okCPU
		}
	}
	for _, c := range checks {
		b.printf("%s\n", c)
	}
	return missed
}

// rssPhase drives --rss-users distinct users into the daemon and reports
// its memory, and again after a restart with --rss-restart.
func (b *bench) rssPhase(ctx context.Context) (missed bool, err error) {
	o, d := b.o, b.daemon
	b.printf("\nRSS: %d distinct users, one END-OF-MESSAGE request each, C=%d, %d limits\n",
		o.rssUsers, rssConns, len(d.f.Limits))
	var redisBefore int64
	if o.backend == backendRedis {
		if redisBefore, _, err = redisMemory(b.redisNodes); err != nil {
			return false, fmt.Errorf("redis INFO: %w", err)
		}
	}
	// Bounded: even at 2,000 requests/s 1,000,000 users take 500 s.
	capDur := time.Duration(o.rssUsers/2000+60) * time.Second
	res, err := runLoad(ctx, loadSpec{Addr: d.addr, Conns: rssConns, Distinct: o.rssUsers, Duration: capDur, Seed: o.seed})
	if err != nil {
		return false, fmt.Errorf("rss load: %w", err)
	}
	b.printf("  load: %s requests in %s (%s req/s), p50 %s, p99 %s, %d errors\n", thousands(res.Requests),
		round(res.Elapsed), thousands(int64(res.Rate()+0.5)), latency(res.Hist.quantile(0.5)),
		latency(res.Hist.quantile(0.99)), res.Errors)
	if res.FirstErr != nil {
		b.printf("  first error: %v\n", res.FirstErr)
	}
	if res.Requests < int64(o.rssUsers) {
		b.printf("  warning: only %d of %d users answered\n", res.Requests, o.rssUsers)
	}
	waited, err := waitSettled(ctx, d.pid(), d.dbPath(), 3*time.Second, 2*time.Minute)
	if err != nil && ctx.Err() != nil {
		return false, err
	}
	settle := "flushed (database and CPU quiet for 3s)"
	if err != nil {
		settle = err.Error()
	}
	b.printf("  %s after %s\n", settle, round(waited))
	if keys, reqs, err := daemonStatus(ctx, d.adminSocket()); err == nil {
		b.printf("  daemon status: %s rate states tracked, %s requests answered since start\n", thousands(keys), thousands(reqs))
	}
	missed = b.printMem("after load", d)
	if o.backend == backendRedis {
		used, keys, err := redisMemory(b.redisNodes)
		if err != nil {
			return missed, fmt.Errorf("redis INFO: %w", err)
		}
		b.printf("  redis: used_memory %s (+%s), %s keys; %.0f bytes per user (%d limits), %.0f bytes per key\n",
			mib(used), mib(used-redisBefore), thousands(keys), float64(used-redisBefore)/float64(o.rssUsers),
			len(d.f.Limits), float64(used-redisBefore)/float64(max(keys, 1)))
	}
	if !o.rssRestart {
		return missed, nil
	}
	stopped, err := d.stop(30 * time.Second)
	if err != nil {
		return missed, fmt.Errorf("stop ratelimitd: %w%s", err, d.logTail())
	}
	took, err := d.start(ctx)
	if err != nil {
		return missed, fmt.Errorf("restart ratelimitd: %w", err)
	}
	b.printf("  restart: stopped (final flush) in %s, restored and listening in %s (pid %d)\n", round(stopped), round(took), d.pid())
	if keys, _, err := daemonStatus(ctx, d.adminSocket()); err == nil {
		b.printf("  daemon status: %s rate states restored\n", thousands(keys))
	}
	b.printMem("after restore", d)
	return missed, nil
}

// printMem prints the daemon's memory and database size, and checks the
// RSS target when 1,000,000 users were sent.
func (b *bench) printMem(when string, d *daemon) (missed bool) {
	m, ok := readMem(d.pid())
	if !ok {
		b.printf("  %s: RSS unavailable (no /proc)\n", when)
		return false
	}
	dbSize := "-"
	if fi, err := os.Stat(d.dbPath()); err == nil {
		dbSize = mib(fi.Size())
	}
	b.printf("  %s: VmRSS %s (anon %s, file %s), VmHWM %s; BoltDB %s\n", when, mib(m.RSS), mib(m.Anon),
		mib(m.File), mib(m.HWM), dbSize)
	if b.o.rssUsers == targetRSSUsers && when == "after load" {
		ok := m.RSS <= targetRSS
		b.printf("  target VmRSS <= %s after %d users: %s\n", mib(targetRSS), targetRSSUsers, verdict(ok))
		return !ok
	}
	return false
}

// stopServers stops the floor and the daemon, if running.
func (b *bench) stopServers() {
	if b.floor != nil {
		b.floor.stop(5 * time.Second)
	}
	if b.daemon != nil && b.daemon.child != nil {
		if _, err := b.daemon.stop(30 * time.Second); err != nil {
			fmt.Fprintln(os.Stderr, "ratelimitd-bench:", err)
		}
	}
	for _, r := range b.redis {
		r.stop(5 * time.Second)
	}
}

// against formats a measured ratio v for a line that compares it with
// target: with two decimals, or with as many more (up to six) as it takes
// to tell it from target, so that a MISS never reads "0.50 >= 0.50".
func against(v, target float64) string {
	for d := 2; d < 6; d++ {
		s := strconv.FormatFloat(v, 'f', d, 64)
		if v == target || s != strconv.FormatFloat(target, 'f', d, 64) {
			return s
		}
	}
	return strconv.FormatFloat(v, 'f', 6, 64)
}

func verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "MISS"
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// latency formats d with three significant digits.
func latency(d time.Duration) string {
	switch {
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d)
	case d < time.Millisecond:
		return fmt.Sprintf("%.1fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// thousands formats n with commas: 1,234,567.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// cpuString is a list of CPU numbers for the output: "1", "1,2,3".
func cpuString(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}
