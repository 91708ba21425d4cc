package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// options are the command-line flags.
type options struct {
	addr         string
	pid          int
	daemonBin    string
	noFloor      bool
	noRedisFloor bool
	listeners    []string
	conns        []int
	keys         []int
	duration     time.Duration
	warmup       time.Duration
	prefill      bool
	requests     int64
	rounds       int
	rcpts        int
	pick         string
	seed         uint64
	rssUsers     int
	rssRestart   bool
	logLevel     string
	flush        time.Duration
	daemonEnv    []string
	pin          bool
	keep         bool
	check        bool
	backend      string
	redisAddrs   []string
	cluster      int
	events       bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("ratelimitd-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	r := rawFlags{conns: "1,8,64", keys: "10000,100000,1000000", listeners: "tcp,unix"}
	defineFlags(fs, o, &r)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: ratelimitd-bench [flags]

Measures ratelimitd (or --addr) against a DUNNO-only server speaking the
same protocol, over C persistent connections and K distinct users, and
prints requests/s, p50, p99 and their ratios. With --backend redis it
prints Redis's CPU per message over the daemon's runs and, at each C and
K, against the Redis floor measured in the same run on the same Redis:
one empty EVALSHA per message, keyed by the message's rate key, sent as
fast as answered and then paced to the daemon's messages a second
(--no-redis-floor skips it).

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
	if err := o.parseLists(r); err != nil {
		return nil, err
	}
	if err := o.validate(r); err != nil {
		return nil, err
	}
	return o, nil
}

// rawFlags are the flags parsed after fs.Parse: lists and addresses.
type rawFlags struct{ conns, keys, denv, listeners, redisAddrs string }

// defineFlags declares every flag on fs, into o and r.
func defineFlags(fs *flag.FlagSet, o *options, r *rawFlags) {
	fs.StringVar(&o.addr, "addr", "", "policy server to measure (host:port); empty: build and start ratelimitd with the default limits")
	fs.IntVar(&o.pid, "pid", 0, "process id of the --addr server, to report its RSS")
	fs.StringVar(&o.daemonBin, "daemon", "", "ratelimitd binary to start; empty: go build it into a temporary directory")
	fs.BoolVar(&o.noFloor, "no-floor", false, "do not measure the DUNNO floor server (the Redis floor has its own flag, --no-redis-floor)")
	fs.BoolVar(&o.noRedisFloor, "no-redis-floor", false, "with --backend redis: do not measure the Redis floor (after each K's cells, for each C: one empty EVALSHA per message, keyed by the message's rate key, on the daemon's Redis for --duration, unpaced and then paced to the daemon's messages a second; its Redis CPU per message against the daemon's)")
	fs.StringVar(&r.listeners, "listeners", r.listeners, "comma-separated listeners to measure: tcp, unix (the daemon and the floor listen on both; ignored with --addr, which is TCP)")
	fs.StringVar(&r.conns, "conns", r.conns, "comma-separated connection counts C")
	fs.StringVar(&r.keys, "keys", r.keys, "comma-separated distinct-user counts K")
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
	fs.StringVar(&r.denv, "daemon-env", "", "comma-separated VAR=value added to the daemon's environment (e.g. GOGC=50,GOMEMLIMIT=140MiB)")
	fs.BoolVar(&o.pin, "pin", false, "pin this program (the load generator) to the first CPU it may use and the servers it starts (ratelimitd, the floor, redis-server) to the others, so that the kernel does not time-slice client and server on the same CPUs (Linux, at least 2 CPUs; with --addr only this program is pinned)")
	fs.BoolVar(&o.keep, "keep", false, "keep the temporary directory (config, state, logs)")
	fs.BoolVar(&o.check, "check", false, "exit 3 if a done-when target is missed")
	fs.StringVar(&o.backend, "backend", backendLocal, "the daemon's rate store: local (memory + BoltDB) or redis")
	fs.StringVar(&r.redisAddrs, "redis-addrs", "", "with --backend redis: comma-separated addresses of the Redis to use, one for a standalone server, several for an existing Redis Cluster; empty: start a redis-server on a free port (or --redis-cluster)")
	fs.StringVar(&r.redisAddrs, "redis-addr", "", "the same as --redis-addrs")
	fs.IntVar(&o.cluster, "redis-cluster", 0, "with --backend redis: start a Redis Cluster of N masters (no replicas) instead of one redis-server")
	fs.BoolVar(&o.events, "events", true, "the daemon records events ([events] enabled); scripts/bench.sh compares a run with --events=false")
}

// parseLists fills o's lists from r: the daemon's environment, the
// listeners, C and K, the Redis addresses.
func (o *options) parseLists(r rawFlags) error {
	for kv := range strings.SplitSeq(r.denv, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("--daemon-env: %q is not VAR=value", kv)
		}
		o.daemonEnv = append(o.daemonEnv, kv)
	}
	for l := range strings.SplitSeq(r.listeners, ",") {
		switch l = strings.TrimSpace(l); l {
		case listenTCP, listenUnix:
			if !slices.Contains(o.listeners, l) {
				o.listeners = append(o.listeners, l)
			}
		default:
			return fmt.Errorf("--listeners: %q is neither %s nor %s", l, listenTCP, listenUnix)
		}
	}
	if o.addr != "" {
		o.listeners = []string{listenTCP}
	}
	var err error
	if o.conns, err = parseList(r.conns, 1, 1<<16); err != nil {
		return fmt.Errorf("--conns: %w", err)
	}
	if o.keys, err = parseList(r.keys, 1, maxUsers); err != nil {
		return fmt.Errorf("--keys: %w", err)
	}
	for a := range strings.SplitSeq(r.redisAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			o.redisAddrs = append(o.redisAddrs, a)
		}
	}
	return nil
}

// validate refuses flag values out of range or that do not go together.
func (o *options) validate(r rawFlags) error {
	switch {
	case o.duration <= 0 || o.duration > time.Hour:
		return errors.New("--duration must be between 0 and 1h")
	case o.warmup < 0 || o.warmup > time.Hour:
		return errors.New("--warmup must be between 0 and 1h")
	case o.requests < 0:
		return errors.New("--requests must not be negative")
	case o.flush < 0 || o.flush > time.Minute:
		return errors.New("--flush-interval must be 0..1m")
	case o.rounds < 1 || o.rounds > 100:
		return errors.New("--rounds must be 1..100")
	case o.rcpts < 0 || o.rcpts > 1000:
		return errors.New("--rcpts must be 0..1000")
	case o.pick != pickRandom && o.pick != pickRoundRobin:
		return fmt.Errorf("--pick must be %s or %s", pickRandom, pickRoundRobin)
	case o.rssUsers < 0 || o.rssUsers > maxUsers:
		return fmt.Errorf("--rss-users must be 0..%d", maxUsers)
	case o.rssUsers > 0 && o.addr != "":
		return errors.New("--rss-users needs the daemon this program starts (no --addr)")
	case o.rssRestart && o.rssUsers == 0:
		return errors.New("--rss-restart needs --rss-users")
	case o.backend != backendLocal && o.backend != backendRedis:
		return fmt.Errorf("--backend must be %s or %s", backendLocal, backendRedis)
	case o.cluster < 0 || o.cluster > 64:
		return errors.New("--redis-cluster must be 0..64")
	case o.cluster > 0 && o.cluster < 3:
		return errors.New("--redis-cluster needs at least 3 masters (redis-cli --cluster create)")
	case o.cluster > 0 && r.redisAddrs != "":
		return errors.New("--redis-cluster starts a cluster: give it or --redis-addrs, not both")
	case (o.cluster > 0 || r.redisAddrs != "") && o.backend != backendRedis:
		return errors.New("--redis-addrs and --redis-cluster need --backend redis")
	}
	return nil
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
