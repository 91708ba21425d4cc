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
