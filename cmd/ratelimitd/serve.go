package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newServeCmd(opts *rootOptions) *cobra.Command {
	files := &serveFiles{}
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the policy daemon",
		Long: `Run the policy daemon: the Postfix policy delegation service (and Exim
${readsocket} service) on every server.policy_listen address, the admin
socket the CLI talks to, and Prometheus metrics on server.metrics_listen.

With no --config ($RATELIMITD_CONFIG, /etc/ratelimitd/ratelimitd.toml) the
embedded default is used: policy service on 127.0.0.1:10031, state (BoltDB
file and admin socket) in /var/lib/ratelimitd (root) or ./ratelimitd-state,
metrics on 127.0.0.1:9731, limits 200/hour + 1000/day per SASL user.

Rate state is kept in memory and written to STATE_DIR/ratelimitd.db every
server.flush_interval (1s): a crash loses at most that much counting, a
restart or upgrade forgives nobody.

Memory: unless GOMEMLIMIT is set, the Go soft memory limit follows the
rate store's size, the per-message bookkeeping's and the buffers of the
state file's flushes and compactions (plus 32 MiB, at least 128 MiB), so
garbage is collected before the heap doubles; when a compaction ends or
the load stops, the memory freed is given back to the system at once.

Signals: SIGHUP reloads the configuration file (an invalid file is
refused, logged, and the running configuration kept; listener changes need
a restart). SIGTERM and SIGINT stop accepting connections, let requests in
progress finish (up to 10s), flush the rate state and exit 0.

Postfix main.cf:
  smtpd_recipient_restrictions = ...,
      check_policy_service { inet:127.0.0.1:10031, timeout=10s, default_action=DUNNO },
      permit_sasl_authenticated, ...
  smtpd_end_of_data_restrictions =
      check_policy_service { inet:127.0.0.1:10031, timeout=10s, default_action=DUNNO }`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(opts.configPath)
			if err != nil {
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			logw, err := files.writer(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer files.close()
			d, err := startDaemon(f, opts.configPath, logw)
			if err != nil {
				return err
			}
			if err := files.writePid(); err != nil {
				d.shutdown(context.Background())
				return err
			}
			sig := make(chan os.Signal, 4)
			signal.Notify(sig, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
			defer signal.Stop(sig)
			for s := range sig {
				if s == syscall.SIGHUP {
					if err := files.reopen(); err != nil {
						d.log.Error("reopening the log file", "err", err)
					}
					d.reload()
					continue
				}
				d.log.Info("shutting down", "signal", s.String())
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := d.shutdown(ctx)
				cancel()
				return err
			}
			return nil
		},
	}
	files.addFlags(c)
	return c
}

// daemon is a running ratelimitd: engine, stores, listeners.
type daemon struct {
	// cfg is the configuration the daemon started with: its listeners,
	// state, quarantine and milter run on it. It is never replaced (a
	// reload applies the limits only), so it is read without a lock.
	cfg        *config.File
	configPath string
	log        *slog.Logger
	started    time.Time
	db         *bolt.DB
	mem        *ratestore.Memory
	state      *ratestore.Persistent
	rcpts      *ratestore.Recipients // per = "addr" recipient sets
	engine     *policy.Engine
	metrics    *metrics
	policy     *postfix.Server
	admin      *http.Server
	metricsSrv *http.Server
	listeners  []string
	// conns caps the policy and milter connections (server.max_connections).
	conns    *srvconn.Limiter
	q        *quarantineState
	wg       sync.WaitGroup
	notifier *notify.Notifier
	// qnotify turns quarantine events into notifications.
	qnotify *quarantineNotify
	// stopMemLimit stops startMemoryLimit's loop (nil if not started).
	stopMemLimit func()

	// reloadMu serialises reloads and guards loaded and restartNeeded,
	// which the admin status handler reads concurrently.
	reloadMu      sync.Mutex
	loaded        *config.File // the last file accepted (cfg until a reload)
	restartNeeded []string     // config.RestartKeys(cfg, loaded)

	// redis is the shared rate store when [store] backend = "redis"
	// (nil otherwise); redisClient its Redis connection.
	redis       *redisstore.Failover
	redisClient *redisstore.Store
}

func newLogger(s config.Server, w interface{ Write([]byte) (int, error) }) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(s.LogLevel))
	o := &slog.HandlerOptions{Level: lvl}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// startDaemon opens the state, starts every listener and returns; errors
// leave nothing running.
func startDaemon(f *config.File, configPath string, logw interface{ Write([]byte) (int, error) }) (_ *daemon, err error) {
	s := f.Server
	d := &daemon{cfg: f, loaded: f, configPath: configPath, log: newLogger(s, logw), started: time.Now()}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()
	if err := os.MkdirAll(s.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("state_dir: %w", err)
	}
	d.db, err = openStateDB(s.DBPath(), false)
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { d.db.Close() })
	d.mem = ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: s.MaxKeys})
	// Restoring drops states that have decayed away under the parameters
	// they were written with, and converts those of limits whose
	// parameters changed.
	d.state, err = openState(d.db, d.mem, time.Duration(s.FlushInterval), storeLimits(f.PolicyConfig()), false, d.log)
	if err != nil {
		if errors.Is(err, ratestore.ErrDamaged) {
			return nil, damaged(s.DBPath(), err)
		}
		return nil, fmt.Errorf("%s: %w", s.DBPath(), err)
	}
	cleanup = append(cleanup, func() { d.state.Close() })
	var rates policy.Store = d.state
	if f.Store.Redis() {
		if d.redis, err = d.openRedis(f.Store, d.state); err != nil {
			return nil, err
		}
		cleanup = append(cleanup, func() { d.redis.Close(); d.redisClient.Close() })
		rates = d.redis
	}
	d.engine, err = policy.NewEngine(f.PolicyConfig(), rates)
	if err != nil {
		return nil, err
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.state.Run(context.Background())
	}()
	if os.Getenv("GOMEMLIMIT") == "" {
		d.startMemoryLimit()
	}
	d.metrics = newMetrics(func() float64 { return float64(d.mem.Len()) })
	d.rcpts, err = ratestore.OpenRecipients(d.db, time.Now(), ratestore.RecipientOptions{FlushInterval: time.Duration(s.FlushInterval), Logger: d.log,
		OnFlushError: func(error) { d.metrics.fault("rcptsets flush") }})
	if err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { d.rcpts.Close() })
	d.engine.UseRecipientSets(d.rcpts)
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.rcpts.Run(context.Background())
	}()
	d.conns = srvconn.NewLimiter(s.MaxConnections, d.log, func(listener string) {
		d.metrics.connRefused.WithLabelValues(listener).Inc()
	})
	d.metrics.watchConns(d.conns)
	d.metrics.reg.MustRegister(stateCollectors(d.state)...)
	// The notifier first: the quarantine's expiry loop may notify at once.
	if err := d.startNotify(); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { d.notifier.Close(context.Background()) })
	if d.redis != nil {
		d.metrics.registerRedisMetrics(d.redis)
	}
	if err := d.openQuarantine(); err != nil {
		return nil, err
	}
	d.policy = &postfix.Server{
		Decider:         mta.DeciderFunc(d.decide),
		Logger:          d.log,
		Metrics:         frontEndMetrics{m: d.metrics},
		IdleTimeout:     time.Duration(s.IdleTimeout),
		RequestTimeout:  time.Duration(s.RequestTimeout),
		AllowedNetworks: s.Networks(),
	}
	var ls []net.Listener
	cleanup = append(cleanup, func() {
		for _, l := range ls {
			l.Close()
		}
	})
	for _, addr := range s.PolicyListen {
		var l net.Listener
		if path, ok := strings.CutPrefix(addr, "unix:"); ok {
			l, err = postfix.ListenUnix(path, os.FileMode(s.Mode()), s.SocketGroup)
		} else {
			l, err = postfix.ListenTCP(addr)
		}
		if err != nil {
			return nil, fmt.Errorf("policy listener %s: %w", addr, err)
		}
		ls = append(ls, l)
		d.listeners = append(d.listeners, "policy "+listenerName(l))
	}
	al, err := listenAdmin(s.AdminSocket)
	if err != nil {
		return nil, err
	}
	ls = append(ls, al)
	d.listeners = append(d.listeners, "admin unix:"+s.AdminSocket)
	var ml net.Listener
	if *s.MetricsListen != "" {
		if ml, err = net.Listen("tcp", *s.MetricsListen); err != nil {
			return nil, fmt.Errorf("metrics listener: %w", err)
		}
		ls = append(ls, ml)
		d.listeners = append(d.listeners, "metrics http://"+ml.Addr().String()+"/metrics")
	}
	if err := d.startMilter(&ls); err != nil {
		return nil, err
	}
	// Everything is open: start serving.
	for _, l := range ls[:len(s.PolicyListen)] {
		l := d.conns.Listener(l, "policy")
		d.goServe("policy", func() error { return d.policy.Serve(l) }, postfix.ErrServerClosed)
	}
	d.admin = (&adminServer{d: d, log: d.log}).httpServer()
	d.goServe("admin", func() error { return d.admin.Serve(al) }, http.ErrServerClosed)
	if ml != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{}))
		d.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		d.goServe("metrics", func() error { return d.metricsSrv.Serve(ml) }, http.ErrServerClosed)
	}
	d.serveMilter()
	d.log.Info("ratelimitd started", "version", version, "config", f.Source, "listeners", d.listeners,
		"state", s.DBPath(), "restored_keys", d.mem.Len())
	d.logConfigNotes(f)
	return d, nil
}

// logConfigNotes logs, at start and after a reload, what the configuration
// needs of the MTA (policy.ConfigAdvice: informational; status warns when
// the MTA is seen not to ask where a limit needs it) and, loudly, a
// configuration without limits.
func (d *daemon) logConfigNotes(f *config.File) {
	for _, a := range policy.ConfigAdvice(f.PolicyConfig()) {
		d.log.Info("configuration note: " + a)
	}
	if f.NoLimits {
		d.log.Warn(`running without limits ([policy] limits = "none"): every sender is unlimited`)
	}
}

func listenerName(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix:" + l.Addr().String()
	}
	return l.Addr().String()
}

func (d *daemon) goServe(name string, serve func() error, closed error) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, closed) {
			d.log.Error("listener failed", "listener", name, "err", err)
		}
	}()
}

// decide is the front ends' Decider: evaluate, measure, record holds.
func (d *daemon) decide(ctx context.Context, req *policy.Request) (dec policy.Decision) {
	defer func() {
		if r := recover(); r != nil {
			// Fail open (DUNNO) on our own faults; the front end logs
			// and counts Decision.Fault.
			dec = policy.Decision{Reason: "internal error, failing open", Fault: fmt.Errorf("%w: %v", policy.ErrPanic, r)}
		}
	}()
	// The front ends record when they received the request: the clock is
	// read once per request (a vDSO clock read costs about 76 ns on a VM),
	// and the decision's latency is what they measure (serverMetrics,
	// milterMetrics).
	now := req.Received
	if now.IsZero() {
		now = time.Now()
	}
	dec = d.engine.Decide(ctx, now, req)
	d.redisDecision(&dec)
	// Faults are logged and counted by the front end's server.
	d.metrics.observe(req, &dec)
	d.notifyRefusal(req, &dec)
	if req.Stage != policy.ViaMilter {
		if dec.Action == policy.Hold || dec.Action == policy.Freeze {
			d.recordHold(ctx, req, &dec)
		} else if req.ProtocolState == policy.StateEndOfMessage {
			d.q.svc.EndOfMessage(req)
		}
	}
	return dec
}

// reload re-reads the configuration file; an invalid one is refused. The
// policy and limits are applied at once; settings that need a restart
// (config.RestartKeys) are logged at WARN and shown by status until the
// file matches the running daemon again.
func (d *daemon) reload() {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	f, err := config.Load(d.configPath)
	if err == nil {
		// The engine's new configuration is installed while the rate
		// states of limits whose parameters changed are converted.
		pc := f.PolicyConfig()
		err = d.state.Reconfigure(storeLimits(pc), func() error { return d.engine.Reload(pc) })
	}
	if err != nil {
		d.log.Error("reload refused, keeping the running configuration", "config", d.loaded.Source, "err", err)
		d.metrics.fault("reload")
		return
	}
	d.loaded = f
	d.q.svc.SetDripLimits(dripLimits(f)) // auto_release belongs to the [[limit]] stack
	d.restartNeeded = config.RestartKeys(d.cfg, f)
	d.log.Info("configuration reloaded", "config", f.Source, "limits", len(d.engine.Limits()))
	d.logConfigNotes(f)
	if len(d.restartNeeded) > 0 {
		d.log.Warn("configuration reloaded: limits applied, but these settings keep their running values until a restart",
			"restart_needed", d.restartNeeded)
	}
}

func (d *daemon) status() Status {
	d.reloadMu.Lock()
	source, restart := d.loaded.Source, slices.Clone(d.restartNeeded)
	d.reloadMu.Unlock()
	st := Status{Version: version, Started: d.started, Uptime: time.Since(d.started).Round(time.Second).String(),
		Config: source, RestartNeeded: restart, Listeners: d.listeners, TrackedKeys: d.mem.Len(), ByAction: map[string]int64{},
		Faults: d.metrics.nFaults.Load(), BadInput: d.metrics.nBad.Load(),
		Stages: d.engine.Stages(), MessagesInFlight: d.engine.InFlight(), Advice: d.engine.Advice(),
		Connections: ConnStatus{Open: d.conns.Open(), Max: d.conns.Max(), Refused: d.conns.Refused()}}
	byAction := d.metrics.byAction()
	for a := range numActions {
		n := byAction[a]
		st.Requests += n
		st.ByAction[policy.Action(a).String()] = n
	}
	if d.notifier.Enabled() {
		ns := d.notifier.Stats()
		st.Notify = &ns
	}
	st.State = stateStatus(d.state)
	if d.redis != nil {
		rs := d.redis.Status()
		st.Store = &rs
	}
	for _, l := range d.engine.Limits() {
		st.Limits = append(st.Limits, fmt.Sprintf("%s: %s/%s per %s by %s, %s, %s", l.Name, formatRate(l.Limit),
			policy.FormatDuration(l.Period), l.Per, strings.Join(l.Key, "+"), l.Mode, l.Action))
	}
	if d.q != nil {
		h := d.q.svc.Health()
		st.Quarantine = &h
	}
	return st
}

// shutdown drains connections, flushes rate state and closes the database.
func (d *daemon) shutdown(ctx context.Context) error {
	var errs []error
	if err := d.policy.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("policy server: %w", err))
	}
	d.stopMilter(ctx)
	if d.metricsSrv != nil {
		d.metricsSrv.Shutdown(ctx)
	}
	d.admin.Shutdown(ctx)
	if d.qnotify != nil {
		d.qnotify.flushAll()
	}
	if err := d.notifier.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("notifications: %w", err))
	}
	if d.stopMemLimit != nil {
		d.stopMemLimit()
	}
	if d.redis != nil {
		d.redis.Close()
		d.redisClient.Close()
	}
	// Close flushes the rate state a last time and stops its Run loop.
	if err := d.state.Close(); err != nil {
		errs = append(errs, fmt.Errorf("flush rate state: %w", err))
	}
	if err := d.rcpts.Close(); err != nil {
		errs = append(errs, fmt.Errorf("flush recipient sets: %w", err))
	}
	d.wg.Wait()
	if err := d.db.Close(); err != nil {
		errs = append(errs, err)
	}
	// The admin listener removed its socket when Shutdown closed it, if
	// the file there was still the one it created.
	d.log.Info("ratelimitd stopped")
	return errors.Join(errs...)
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// Soft memory limit (startMemoryLimit).
const (
	// memoryHeadroom is the heap the limit leaves above what the daemon
	// is known to hold: the garbage collector runs about once per this
	// many bytes allocated.
	memoryHeadroom = 32 << 20
	// memoryFloor is the least limit set.
	memoryFloor = 128 << 20
	// The memory freed is given back to the system (debug.FreeOSMemory,
	// a collection) when the flush and compaction buffers
	// (ratestore.Persistent.Working) shrink from one tick to the next by
	// releaseDrop (a compaction ended) or from releaseQuiet or more to
	// nothing (the load stopped: a flush found nothing to write); at most
	// once per releaseEvery, a release that comes sooner waiting for it.
	releaseDrop  = 16 << 20
	releaseQuiet = 1 << 20
	releaseEvery = 2 * time.Second
)

// shouldRelease reports whether the flush and compaction buffers going
// from last to working bytes in one tick calls for giving the memory back
// to the system (see releaseDrop).
func shouldRelease(last, working int64) bool {
	return last-working >= releaseDrop || (working == 0 && last >= releaseQuiet)
}

// releaser decides, tick by tick, when the daemon gives freed memory back
// to the system (see releaseDrop). The zero value starts with no buffers
// and no release made.
type releaser struct {
	last     int64     // the buffers' bytes at the last tick
	due      bool      // a release waits for releaseEvery to pass
	released time.Time // the last release
}

// tick records the buffers' size working (bytes) at now and reports
// whether to release now.
func (r *releaser) tick(now time.Time, working int64) bool {
	r.due = r.due || shouldRelease(r.last, working)
	r.last = working
	if !r.due || now.Sub(r.released) < releaseEvery {
		return false
	}
	r.due, r.released = false, now
	return true
}

// memoryLimit is the soft memory limit startMemoryLimit sets, in bytes:
// what the daemon holds on the Go heap plus memoryHeadroom, at least
// memoryFloor; and the flush and compaction buffers' part of it (bytes,
// ratestore.Persistent.Working). It never fails. What it holds is the
// larger of what it is known to hold (knownHeap), which follows a growing
// store at once, and the heap the last collection found live, which covers
// what knownHeap misses (BoltDB's transactions, a compaction's other
// buffers).
func (d *daemon) memoryLimit() (limit, working int64) {
	known, working := d.knownHeap()
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(live)
	if live[0].Value.Kind() == rtmetrics.KindUint64 {
		known = max(known, int64(live[0].Value.Uint64()))
	}
	return max(known+memoryHeadroom, memoryFloor), working
}

// knownHeap returns the Go heap the daemon is known to hold, in bytes: the
// rate store, the per-message bookkeeping and the state file's flush and
// compaction buffers; and those buffers' part of it.
func (d *daemon) knownHeap() (known, working int64) {
	working = d.state.Working()
	return d.mem.Footprint() + d.engine.Footprint() + working, working
}

// startMemoryLimit keeps the Go heap near what the daemon holds: every
// second the soft memory limit is set to memoryLimit, so garbage from
// flushes is collected before the heap doubles (GOGC's default), while the
// limit stays above the live heap (below it the collector runs back to
// back). When a compaction ends or the load stops (shouldRelease), the
// memory is given back to the system at once (debug.FreeOSMemory) rather
// than by the runtime's background scavenger, so that the resident size of
// a quiet daemon is what it holds. Setting GOMEMLIMIT in the environment
// turns this off.
func (d *daemon) startMemoryLimit() {
	// The restore's buffers are garbage by now: give them back before
	// the first request (1,000,000 users: VmHWM 206 MiB, VmRSS 130 MiB
	// after this).
	debug.FreeOSMemory()
	limit, working := d.memoryLimit()
	debug.SetMemoryLimit(limit)
	rel := releaser{last: working, released: time.Now()}
	stop := make(chan struct{})
	d.stopMemLimit = func() { close(stop) }
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				limit, working := d.memoryLimit()
				debug.SetMemoryLimit(limit)
				if rel.tick(now, working) {
					debug.FreeOSMemory()
				}
			}
		}
	}()
}
