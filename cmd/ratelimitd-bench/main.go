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
// per request and per message, for each master and in total.
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
// Usage:
//
//	go run ./cmd/ratelimitd-bench [flags]
//	go run ./cmd/ratelimitd-bench --conns 64 --keys 100000 --duration 10s
//	go run ./cmd/ratelimitd-bench --rss-users 1000000 --rss-restart
//	go run ./cmd/ratelimitd-bench --backend redis --redis-cluster 3 --conns 64 --keys 100000 --listeners tcp --no-floor
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

// options are the command-line flags.
type options struct {
	addr       string
	pid        int
	daemonBin  string
	noFloor    bool
	listeners  []string
	conns      []int
	keys       []int
	duration   time.Duration
	warmup     time.Duration
	prefill    bool
	requests   int64
	rounds     int
	rcpts      int
	pick       string
	seed       uint64
	rssUsers   int
	rssRestart bool
	logLevel   string
	flush      time.Duration
	daemonEnv  []string
	pin        bool
	keep       bool
	check      bool
	backend    string
	redisAddrs []string
	cluster    int
	events     bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ratelimitd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	conns, keys, denv, listeners, redisAddrs := "1,8,64", "10000,100000,1000000", "", "tcp,unix", ""
	fs.StringVar(&o.addr, "addr", "", "policy server to measure (host:port); empty: build and start ratelimitd with the default limits")
	fs.IntVar(&o.pid, "pid", 0, "process id of the --addr server, to report its RSS")
	fs.StringVar(&o.daemonBin, "daemon", "", "ratelimitd binary to start; empty: go build it into a temporary directory")
	fs.BoolVar(&o.noFloor, "no-floor", false, "do not measure the DUNNO floor server")
	fs.StringVar(&listeners, "listeners", listeners, "comma-separated listeners to measure: tcp, unix (the daemon and the floor listen on both; ignored with --addr, which is TCP)")
	fs.StringVar(&conns, "conns", conns, "comma-separated connection counts C")
	fs.StringVar(&keys, "keys", keys, "comma-separated distinct-user counts K")
	fs.DurationVar(&o.duration, "duration", defaultDuration, "measured time per cell (and the cap of --requests)")
	fs.DurationVar(&o.warmup, "warmup", 300*time.Millisecond, "unmeasured load before each run")
	fs.BoolVar(&o.prefill, "prefill", true, "before the cells of each K, every one of the K users sends one message to ratelimitd (unmeasured), so the runs measure a daemon holding its users' rate states, as in steady operation, not the store's growth; --prefill=false measures from an empty store")
	fs.Int64Var(&o.requests, "requests", 0, "end a cell after this many measured requests (0: by --duration only)")
	fs.IntVar(&o.rounds, "rounds", 2, "runs per cell and target, alternating floor and ratelimitd, each --duration/rounds long")
	fs.IntVar(&o.rcpts, "rcpts", 1, "RCPT requests before each message's END-OF-MESSAGE request")
	fs.StringVar(&o.pick, "pick", pickRandom, "user of each message: random (uniform over K) or roundrobin")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the random user choice")
	fs.IntVar(&o.rssUsers, "rss-users", 0, "after the table, send one END-OF-MESSAGE for each of N distinct users (C=64) and report the daemon's RSS")
	fs.BoolVar(&o.rssRestart, "rss-restart", false, "with --rss-users: restart the daemon and report its RSS after restoring the state")
	fs.DurationVar(&o.flush, "flush-interval", time.Second, "the daemon's flush_interval (write-behind to BoltDB)")
	fs.StringVar(&o.logLevel, "log-level", "info", "the daemon's log_level (info logs one line per deferred request)")
	fs.StringVar(&denv, "daemon-env", "", "comma-separated VAR=value added to the daemon's environment (e.g. GOGC=50,GOMEMLIMIT=140MiB)")
	fs.BoolVar(&o.pin, "pin", false, "pin this program (the load generator) to the first CPU it may use and the servers it starts (ratelimitd, the floor, redis-server) to the others, so that the kernel does not time-slice client and server on the same CPUs (Linux, at least 2 CPUs; with --addr only this program is pinned)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (config, state, logs)")
	fs.BoolVar(&o.check, "check", false, "exit 3 if a done-when target is missed")
	fs.StringVar(&o.backend, "backend", backendLocal, "the daemon's rate store: local (memory + BoltDB) or redis")
	fs.StringVar(&redisAddrs, "redis-addrs", "", "with --backend redis: comma-separated addresses of the Redis to use, one for a standalone server, several for an existing Redis Cluster; empty: start a redis-server on a free port (or --redis-cluster)")
	fs.StringVar(&redisAddrs, "redis-addr", "", "the same as --redis-addrs")
	fs.IntVar(&o.cluster, "redis-cluster", 0, "with --backend redis: start a Redis Cluster of N masters (no replicas) instead of one redis-server")
	fs.BoolVar(&o.events, "events", true, "the daemon records events ([events] enabled); scripts/bench.sh compares a run with --events=false")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: ratelimitd-bench [flags]

Measures ratelimitd (or --addr) against a DUNNO-only server speaking the
same protocol, over C persistent connections and K distinct users, and
prints requests/s, p50, p99 and their ratios.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for kv := range strings.SplitSeq(denv, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("--daemon-env: %q is not VAR=value", kv)
		}
		o.daemonEnv = append(o.daemonEnv, kv)
	}
	for l := range strings.SplitSeq(listeners, ",") {
		switch l = strings.TrimSpace(l); l {
		case listenTCP, listenUnix:
			if !slices.Contains(o.listeners, l) {
				o.listeners = append(o.listeners, l)
			}
		default:
			return nil, fmt.Errorf("--listeners: %q is neither %s nor %s", l, listenTCP, listenUnix)
		}
	}
	if o.addr != "" {
		o.listeners = []string{listenTCP}
	}
	var err error
	if o.conns, err = parseList(conns, 1, 1<<16); err != nil {
		return nil, fmt.Errorf("--conns: %w", err)
	}
	if o.keys, err = parseList(keys, 1, maxUsers); err != nil {
		return nil, fmt.Errorf("--keys: %w", err)
	}
	switch {
	case o.duration <= 0 || o.duration > time.Hour:
		return nil, errors.New("--duration must be between 0 and 1h")
	case o.warmup < 0 || o.warmup > time.Hour:
		return nil, errors.New("--warmup must be between 0 and 1h")
	case o.requests < 0:
		return nil, errors.New("--requests must not be negative")
	case o.flush < 0 || o.flush > time.Minute:
		return nil, errors.New("--flush-interval must be 0..1m")
	case o.rounds < 1 || o.rounds > 100:
		return nil, errors.New("--rounds must be 1..100")
	case o.rcpts < 0 || o.rcpts > 1000:
		return nil, errors.New("--rcpts must be 0..1000")
	case o.pick != pickRandom && o.pick != pickRoundRobin:
		return nil, fmt.Errorf("--pick must be %s or %s", pickRandom, pickRoundRobin)
	case o.rssUsers < 0 || o.rssUsers > maxUsers:
		return nil, fmt.Errorf("--rss-users must be 0..%d", maxUsers)
	case o.rssUsers > 0 && o.addr != "":
		return nil, errors.New("--rss-users needs the daemon this program starts (no --addr)")
	case o.rssRestart && o.rssUsers == 0:
		return nil, errors.New("--rss-restart needs --rss-users")
	case o.backend != backendLocal && o.backend != backendRedis:
		return nil, fmt.Errorf("--backend must be %s or %s", backendLocal, backendRedis)
	case o.cluster < 0 || o.cluster > 64:
		return nil, errors.New("--redis-cluster must be 0..64")
	case o.cluster > 0 && o.cluster < 3:
		return nil, errors.New("--redis-cluster needs at least 3 masters (redis-cli --cluster create)")
	case o.cluster > 0 && redisAddrs != "":
		return nil, errors.New("--redis-cluster starts a cluster: give it or --redis-addrs, not both")
	case (o.cluster > 0 || redisAddrs != "") && o.backend != backendRedis:
		return nil, errors.New("--redis-addrs and --redis-cluster need --backend redis")
	}
	for a := range strings.SplitSeq(redisAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.redisAddrs = append(o.redisAddrs, a)
		}
	}
	return o, nil
}

// parseList parses "1,8,64" (underscores allowed: 100_000).
func parseList(s string, lo, hi int) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.ReplaceAll(strings.TrimSpace(f), "_", "")
		n, err := strconv.Atoi(f)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q is not a number in %d..%d", f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}

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
	var serverCPUs []int
	if o.pin {
		gen, servers, err := pinPlan()
		if err != nil {
			return 0, err
		}
		if err := pinProcess(os.Getpid(), gen); err != nil {
			return 0, err
		}
		serverCPUs = servers
		b.printf("pinned: load generator on CPU %s, servers on CPUs %s\n", cpuString(gen), cpuString(servers))
	}
	target := o.addr
	targetPID := o.pid
	if target == "" {
		bin := o.daemonBin
		if bin == "" {
			b.printf("building ratelimitd ...\n")
			if bin, err = buildDaemon(ctx, b.dir); err != nil {
				return 0, err
			}
		}
		if err := b.redisServers(ctx, serverCPUs); err != nil {
			return 0, err
		}
		if b.daemon, err = newDaemon(bin, b.dir, o.logLevel, o.flush, storeTable(o.backend, o.redisAddrs), o.events); err != nil {
			return 0, err
		}
		b.daemon.env = o.daemonEnv
		b.daemon.cpus = serverCPUs
		took, err := b.daemon.start(ctx)
		if err != nil {
			return 0, err
		}
		target, targetPID = b.daemon.addr, b.daemon.pid()
		b.printf("ratelimitd: pid %d on %s and %s, limits %s, state %s (flush_interval %s), log_level %s, store %s; ready in %s\n",
			targetPID, target, b.daemon.unixAddr, describeLimits(b.daemon.f), b.daemon.dbPath(), o.flush, o.logLevel, o.backend, round(took))
		if len(o.daemonEnv) > 0 {
			b.printf("ratelimitd environment: %s\n", strings.Join(o.daemonEnv, " "))
		}
	} else {
		b.printf("target: %s (pid %d)\n", target, targetPID)
	}
	if !o.noFloor {
		unixPath := ""
		if slices.Contains(o.listeners, listenUnix) {
			unixPath = b.dir + "/floor.sock"
		}
		if b.floor, err = startFloor(ctx, b.dir+"/floor.log", unixPath, serverCPUs); err != nil {
			return 0, err
		}
		b.printf("floor: pid %d on %s %s (mta/postfix.Server answering DUNNO without deciding)\n", b.floor.pid(),
			b.floor.addr, b.floor.unixAddr)
	}
	limit := "duration " + o.duration.String()
	if o.requests > 0 {
		limit = fmt.Sprintf("%d requests or %s", o.requests, o.duration)
	}
	b.printf("load: per message %d RCPT + 1 END-OF-MESSAGE request (31 attributes), user %s over K; per cell and target %s\n",
		o.rcpts, o.pick, limit)
	b.printf("      in %d alternating runs, each after %s of warmup on fresh connections\n\n", o.rounds, o.warmup)

	b.printf("%-4s %-11s %5s %8s %10s %9s %9s %9s %9s %8s %6s %10s\n",
		"via", "target", "C", "K", "req/s", "p50", "p99", "p99.9", "CPU/req", "refused", "errors", "RSS")
	// Redis's share, over the cells (not the prefills).
	measureRedis := o.backend == backendRedis && b.daemon != nil
	cost := redisCost{perMessage: o.rcpts + 1}
	for _, k := range o.keys {
		if o.prefill {
			if err := b.prefillUsers(ctx, target, targetPID, k); err != nil {
				return 0, err
			}
		}
		var before redisCost
		if measureRedis {
			if before, err = snapshotRedisCost(ctx, b.redisNodes, b.daemon.adminSocket()); err != nil {
				return 0, fmt.Errorf("redis INFO: %w", err)
			}
		}
		for _, l := range o.listeners {
			for _, c := range o.conns {
				if err := b.cell(ctx, l, c, k, target, targetPID); err != nil {
					return 0, err
				}
			}
		}
		if measureRedis {
			after, err := snapshotRedisCost(ctx, b.redisNodes, b.daemon.adminSocket())
			if err != nil {
				return 0, fmt.Errorf("redis INFO: %w", err)
			}
			cost.add(after, before)
		}
	}
	missed := b.printRatios()
	if measureRedis {
		b.printf("%s\n", cost.describe())
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
			res, err := runLoad(ctx, spec)
			if err != nil {
				return fmt.Errorf("%s C=%d K=%d: %w", sd.name, conns, keys, err)
			}
			sd.res.add(res)
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
