// Package daemon is a running ratelimitd built from its configuration:
// Start opens the state and starts the listeners, Reload applies a new
// configuration (SIGHUP), Shutdown drains and flushes (SIGTERM); both front
// ends call Daemon.Decide. OpenRates, OpenQuarantine and OpenEvents open
// the same state for the CLI when no daemon runs. Methods are safe for
// concurrent use; Shutdown is called once.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/metrics"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/outcome"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
	"github.com/ratelimitd/ratelimitd/statedb"
	"github.com/ratelimitd/ratelimitd/web"
)

// Version is set at link time (-ldflags -X ...daemon.Version=).
var Version = "dev"

// Daemon is a running ratelimitd; Start it, stop it with Shutdown.
type Daemon struct {
	cfg          *config.File // as started; a reload replaces only the limits
	configPath   string
	log          *slog.Logger
	started      time.Time
	db           *bolt.DB
	mem          *ratestore.Memory
	state        *ratestore.Persistent
	rcpts        *ratestore.Recipients
	flusher      *statedb.Flusher
	stopFlusher  context.CancelFunc
	events       *events.Log // nil with [events] enabled = false
	web          *web.Server // nil with [web] listen = ""
	engine       *policy.Engine
	metrics      *metrics.Metrics
	policy       *postfix.Server
	admin        *http.Server
	metricsSrv   *http.Server
	listeners    []string
	seen         frontEnds
	q            *quarantineState
	wg           sync.WaitGroup
	notifier     *notify.Notifier
	qnotify      *quarantineNotify
	stopMemLimit func()   // nil if not started
	cleanup      []func() // undoes Start's steps, last first, on a failure

	reloadMu      sync.Mutex   // guards loaded and restartNeeded
	loaded        *config.File // the last file accepted
	restartNeeded []string

	redis       *redisstore.Failover // nil unless [store] backend = "redis"
	redisClient *redisstore.Store
	redisLog    *srvconn.ThrottledLog

	opts Options
	lost []statedb.Lost // unreadable records set aside at start

	// nil without the [outcome] feed or listener
	join     *outcome.Join
	stopFeed context.CancelFunc
	noticesL net.Listener
	notices  *outcome.NoticeServer
	eximL    net.Listener
	exim     *outcome.EximServer
}

func newLogger(s config.Server, w io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(s.LogLevel))
	o := &slog.HandlerOptions{Level: lvl}
	if s.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// listeners are the sockets Start opened, served once all are open.
type listeners struct {
	policy  []net.Listener
	admin   net.Listener
	metrics net.Listener // nil when metrics_listen = ""
}

// Options are Start's choices beyond the configuration.
type Options struct {
	// AcceptStateLoss (serve --accept-state-loss) starts on a state file
	// with unreadable records, set aside (statedb.SetAside); without it
	// Start refuses the file (statedb.RecordsLost).
	AcceptStateLoss bool
}

// Start opens the state, starts every listener and returns the running
// daemon, logging to logw; Reload rereads configPath. On error nothing is
// left running.
func Start(f *config.File, configPath string, logw io.Writer, opts Options) (_ *Daemon, err error) {
	d := &Daemon{cfg: f, loaded: f, configPath: configPath, log: newLogger(f.Server, logw), started: time.Now(), opts: opts}
	defer func() {
		if err != nil {
			for i := len(d.cleanup) - 1; i >= 0; i-- {
				d.cleanup[i]()
			}
		}
	}()
	ra, err := lookupRunAs(f.Server)
	if err != nil {
		return nil, err
	}
	if cu, _ := user.Current(); ra == nil && f.Server.User != "" && (cu == nil || cu.Username != f.Server.User) {
		d.log.Warn("not started as root: server.user does not apply", "user", f.Server.User, "uid", os.Geteuid())
	}
	dbExists := true
	if ra != nil {
		if dbExists, err = ra.checkStateDir(f.Server.StateDir, f.Server.DBPath()); err != nil {
			return nil, err
		}
	}
	if err := d.openStores(); err != nil {
		return nil, err
	}
	if ra != nil && !dbExists {
		// Made by root just now: the user's, as if it had made it.
		if err := os.Chown(f.Server.DBPath(), ra.uid, ra.gid); err != nil {
			return nil, fmt.Errorf("state file: %w", err)
		}
	}
	if err := d.openServices(); err != nil {
		return nil, err
	}
	ls, err := d.listen()
	if err != nil {
		return nil, err
	}
	if err := d.startWeb(); err != nil {
		return nil, err
	}
	if ra != nil {
		if err := ra.drop(); err != nil {
			return nil, err
		}
		d.log.Info("dropped privileges", "user", ra.user, "group", ra.group, "uid", ra.uid, "gid", ra.gid)
	}
	d.serve(ls)
	d.startOutcomeFeed()
	d.log.Info("ratelimitd started", "version", ReleaseVersion(), "config", f.Source, "listeners", d.listeners,
		"state", f.Server.DBPath(), "restored_keys", d.mem.Len())
	d.logConfigNotes(f)
	return d, nil
}

// openStores opens the state file, the rate state, the engine (on it or
// on Redis), the metrics, the recipient sets, the event log (unless
// [events] is off) and the outcome join, and starts their flusher and the
// memory limit.
func (d *Daemon) openStores() (err error) {
	f, s := d.cfg, d.cfg.Server
	if err := os.MkdirAll(s.StateDir, 0o750); err != nil {
		return fmt.Errorf("state_dir: %w", err)
	}
	// Read before the first commit writes the damaged meta page again.
	if warn, _ := statedb.MetaFallback(s.DBPath()); warn != "" {
		d.log.Warn("state file: "+warn, "file", s.DBPath())
	}
	d.db, err = statedb.Open(s.DBPath(), false, 0)
	if errors.Is(err, statedb.ErrPermission) {
		return notMine(s.StateDir, s.DBPath())
	}
	if err != nil {
		return err
	}
	d.cleanup = append(d.cleanup, func() { d.db.Close() })
	if err := d.checkRecords(); err != nil {
		return err
	}
	d.mem = ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: s.MaxKeys})
	d.metrics = metrics.New(func() float64 { return float64(d.mem.Len()) })
	d.state, err = ratestore.NewPersistent(d.db, d.mem, ratestore.PersistOptions{Limits: storeLimits(f.PolicyConfig()), Logger: d.log})
	if err != nil {
		if errors.Is(err, ratestore.ErrDamaged) {
			return statedb.Damaged(s.DBPath(), err)
		}
		return fmt.Errorf("%s: %w", s.DBPath(), err)
	}
	d.cleanup = append(d.cleanup, func() { d.state.Close() })
	d.state.NoteLost(len(d.lost), statedb.LostKeys(d.lost))
	var rates policy.Store = d.state
	if f.Store.Redis() {
		if d.redis, err = d.openRedis(f.Store, d.state); err != nil {
			return err
		}
		d.cleanup = append(d.cleanup, func() { d.redis.Close(); d.redisClient.Close() })
		rates = d.redis
	}
	d.engine, err = policy.NewEngine(d.policyConfig(f), rates)
	if err != nil {
		return err
	}
	d.flusher = statedb.NewFlusher(time.Duration(s.FlushInterval), d.log, func(name string, _ error) { d.metrics.Fault(name + " flush") })
	d.flusher.Add("rate state", d.state.Tick)
	if os.Getenv("GOMEMLIMIT") == "" {
		d.startMemoryLimit()
	}
	d.rcpts, err = ratestore.OpenRecipients(d.db, time.Now(), ratestore.RecipientOptions{})
	if err != nil {
		return err
	}
	d.cleanup = append(d.cleanup, func() { d.rcpts.Close() })
	d.engine.UseRecipientSets(d.rcpts)
	d.flusher.Add("rcptsets", d.rcpts.Tick)
	if f.Events.On() {
		if d.events, err = events.Open(d.db, eventOptions(f)); err != nil {
			return fmt.Errorf("%s: %w", s.DBPath(), err)
		}
		d.cleanup = append(d.cleanup, func() { d.events.Close() })
		d.flusher.Add("event log", d.events.Tick)
	}
	if err := d.openOutcome(); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	d.wg.Go(func() { d.flusher.Run(ctx) })
	d.stopFlusher = stop
	d.cleanup = append(d.cleanup, stop)
	return nil
}

// StateFormats describes every record of the state file, for statedb.
func StateFormats() []statedb.Format {
	return slices.Concat(ratestore.Formats(), quarantine.Formats(), events.Formats(), outcome.Formats())
}

// checkRecords refuses a state file with unreadable records unless the
// operator accepted their loss: then they are set aside.
func (d *Daemon) checkRecords() error {
	path := d.cfg.Server.DBPath()
	lost, _, err := statedb.Scan(d.db, StateFormats())
	if err != nil {
		return statedb.Damaged(path, err)
	}
	if len(lost) == 0 {
		return nil
	}
	if !d.opts.AcceptStateLoss {
		return statedb.RecordsLost(path, lost)
	}
	if err := statedb.SetAside(d.db, StateFormats(), lost); err != nil {
		return statedb.Damaged(path, err)
	}
	d.lost = lost
	d.log.Error("starting without the unreadable records of the state file (--accept-state-loss): their keys start afresh, quarantine entries are kept in quarantine/damaged",
		"file", path, "records", len(lost), "keys", statedb.LostKeys(lost))
	return nil
}

// openServices sets up the notifier ([notify] changes need a restart),
// collectors, quarantine and policy server.
func (d *Daemon) openServices() (err error) {
	s := d.cfg.Server
	// The notifier first: the quarantine's expiry loop may notify at once.
	if d.notifier, err = notify.New(d.cfg.Notify, notify.Options{Logger: d.log}); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	d.metrics.Registry().MustRegister(slices.Concat(metrics.StateCollectors(d.state), metrics.EventCollectors(d.events),
		d.notifier.Collectors())...)
	d.cleanup = append(d.cleanup, func() { d.notifier.Close(context.Background()) })
	if d.redis != nil {
		d.metrics.RegisterRedis(d.redis)
	}
	if err := d.openQuarantine(); err != nil {
		return err
	}
	d.presetMetrics()
	d.policy = &postfix.Server{
		Decider:         mta.DeciderFunc(d.Decide),
		Logger:          d.log,
		Metrics:         frontEndMetrics{m: d.metrics},
		IdleTimeout:     time.Duration(s.IdleTimeout),
		RequestTimeout:  time.Duration(s.RequestTimeout),
		AllowedNetworks: s.Networks(),

		FirstRequestTimeout: time.Duration(s.FirstRequestTimeout),
		Budget:              d.budget("policy", s.MaxConnections, srvconn.DefaultMaxConns(), s.MaxConnectionsPerClient),
	}
	return nil
}

// budget is a front end's connection budget (0: the defaults), each
// closed connection counted under frontEnd.
func (d *Daemon) budget(frontEnd string, maxConns, def, perClient int) srvconn.Budget {
	return srvconn.Budget{Max: cmp.Or(maxConns, def), PerClient: cmp.Or(perClient, srvconn.DefaultPerClient),
		Closed: func(reason string) { d.metrics.ConnClosed(frontEnd, reason) }}
}

// connStatus is the front ends' connection budgets, for status.
func (d *Daemon) connStatus() []admin.ConnStatus {
	out := []admin.ConnStatus{connStatus("policy", d.policy.ConnStats())}
	if d.q.milter != nil {
		out = append(out, connStatus("milter", d.q.milter.ConnStats()))
	}
	return out
}

func connStatus(frontEnd string, st srvconn.Stats) admin.ConnStatus {
	return admin.ConnStatus{FrontEnd: frontEnd, Open: st.Open, Max: st.Max, PerClient: st.PerClient, Closed: st.Closed}
}

// listen opens the policy, admin, metrics and milter listeners, taking
// those systemd passed; a passed socket no listener names is an error.
func (d *Daemon) listen() (ls listeners, err error) {
	s := d.cfg.Server
	d.cleanup = append(d.cleanup, func() {
		for _, l := range slices.Concat(ls.policy, []net.Listener{ls.admin, ls.metrics, d.q.milterL}) {
			if l != nil {
				l.Close()
			}
		}
	})
	inh, err := srvconn.InheritedListeners()
	if err != nil {
		return ls, err
	}
	defer inh.Close()
	for _, addr := range s.PolicyListen {
		l, err := d.listenMTA("policy", addr, inh)
		if err != nil {
			return ls, err
		}
		ls.policy = append(ls.policy, l)
	}
	if ls.admin, err = admin.Listen(s.AdminSocket); err != nil {
		return ls, err
	}
	d.listeners = append(d.listeners, "admin unix:"+s.AdminSocket)
	if *s.MetricsListen != "" {
		if ls.metrics, err = net.Listen("tcp", *s.MetricsListen); err != nil {
			return ls, fmt.Errorf("metrics listener: %w", err)
		}
		d.listeners = append(d.listeners, "metrics http://"+ls.metrics.Addr().String()+"/metrics")
	}
	if err = d.startMilter(inh); err != nil {
		return ls, err
	}
	return ls, inh.Untaken()
}

// listenMTA opens the listener of kind ("policy", "milter") at addr
// ("unix:/path" with server.socket_mode and socket_group, or host:port),
// taking the one systemd passed for it.
func (d *Daemon) listenMTA(kind, addr string, inh *srvconn.Inherited) (net.Listener, error) {
	l, from := inh.Take(addr), " (from systemd)"
	var err error
	if l == nil {
		from = ""
		if path, ok := strings.CutPrefix(addr, "unix:"); ok {
			l, err = srvconn.ListenUnixGroup(path, os.FileMode(d.cfg.Server.Mode()), d.cfg.Server.SocketGroup)
		} else {
			l, err = net.Listen("tcp", addr)
		}
	}
	if err != nil {
		return nil, listenError(kind, addr, err, inh)
	}
	d.listeners = append(d.listeners, kind+" "+srvconn.Name(l)+from)
	return l, nil
}

// listenError is the error of the kind of listener at addr that failed
// with err. A unix socket denied for want of permission gets the ways to
// have it made, and does not wrap fs.ErrPermission, whose CLI advice
// ("run as root") is not about the daemon.
func listenError(kind, addr string, err error, inh *srvconn.Inherited) error {
	if !strings.HasPrefix(addr, "unix:") || !errors.Is(err, fs.ErrPermission) || inh.Len() > 0 {
		return fmt.Errorf("%s listener %s: %w", kind, addr, err)
	}
	return fmt.Errorf("%s listener %s: %v (start the daemon as root with server.user set: it opens the socket, then drops to that user; "+
		"or, under systemd, a socket unit such as ratelimitd.socket creates it: systemctl start ratelimitd.socket)", kind, addr, err)
}

// serve starts serving on every listener.
func (d *Daemon) serve(ls listeners) {
	budgets := map[string]func() srvconn.Stats{"policy": d.policy.ConnStats}
	if d.q.milter != nil {
		budgets["milter"] = d.q.milter.ConnStats
	}
	d.metrics.WatchConns(budgets)
	for _, l := range ls.policy {
		l := d.seen.watch(l, "policy")
		d.goServe("policy", func() error { return d.policy.Serve(l) }, postfix.ErrServerClosed)
	}
	// /metrics is capped; the admin socket, the postmaster's, is not (the
	// CLI's keep-alives would wait).
	d.admin = d.services().HTTPServer()
	d.goServe("admin", func() error { return d.admin.Serve(ls.admin) }, http.ErrServerClosed)
	if ls.metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.Registry(), promhttp.HandlerOpts{}))
		lim := srvconn.NewHTTPLimit(srvconn.HTTPConns())
		d.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
			WriteTimeout: 30 * time.Second, IdleTimeout: 30 * time.Second, ConnState: lim.ConnState}
		metricsL := lim.Listener(ls.metrics)
		d.goServe("metrics", func() error { return d.metricsSrv.Serve(metricsL) }, http.ErrServerClosed)
	}
	if d.q.milter != nil {
		l := d.seen.watch(d.q.milterL, "milter")
		d.goServe("milter", func() error { return d.q.milter.Serve(l) }, milter.ErrServerClosed)
	}
}

// logConfigNotes logs policy.ConfigAdvice, the warnings and, loudly, a
// configuration without limits.
func (d *Daemon) logConfigNotes(f *config.File) {
	for _, a := range policy.ConfigAdvice(f.PolicyConfig()) {
		d.log.Info("configuration note: " + a)
	}
	for _, w := range f.Warnings() {
		d.log.Warn("configuration warning: " + w)
	}
	if f.NoLimits {
		d.log.Warn(`running without limits ([policy] limits = "none"): every sender is unlimited`)
	}
}

// goServe runs serve until Shutdown, logging an error other than closed.
func (d *Daemon) goServe(name string, serve func() error, closed error) {
	d.wg.Go(func() {
		if err := serve(); err != nil && !errors.Is(err, closed) {
			d.log.Error("listener failed", "listener", name, "err", err)
		}
	})
}

// startWeb starts the browser console when [web] listen is set.
func (d *Daemon) startWeb() error {
	c := d.cfg.Web
	if c.Listen == "" {
		return nil
	}
	s, err := web.New(web.Options{Listen: c.Listen, TLSCert: c.TLSCert, TLSKey: c.TLSKey, UsersFile: c.UsersFile, TrustedProxies: c.Proxies(),
		Services: d.services()})
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	d.web = s
	d.cleanup = append(d.cleanup, func() { s.Shutdown(context.Background()) })
	d.listeners = append(d.listeners, "console "+s.URL())
	return nil
}

// WebAddr is the console's listening address ("" when it is off).
func (d *Daemon) WebAddr() string {
	if d.web == nil {
		return ""
	}
	return d.web.Addr().String()
}

// frontEndFaults are the fault kinds a front end counts (mta), the
// milter's prefixed "milter ".
var frontEndFaults = []string{mta.FaultPanic, mta.FaultDecision, mta.FaultHoldRecord, mta.FaultFreeze,
	mta.FaultNoQuarantineAction, mta.FaultSpool}

// daemonFaults are the fault kinds the daemon itself counts.
var daemonFaults = []string{"reload", "redis unavailable", "redis bad state",
	"rate state flush", "rcptsets flush", "event log flush"}

// presetMetrics makes every fault kind, bad-input reason and running
// limit's decisions exist at zero from the start.
func (d *Daemon) presetMetrics() {
	kinds := append([]string(nil), daemonFaults...)
	for _, k := range frontEndFaults {
		kinds = append(kinds, k, "milter "+k)
	}
	reasons := []string{postfix.ReasonLineTooLong, postfix.ReasonTooManyAttributes, postfix.ReasonMalformed,
		postfix.ReasonUnknownRequest, postfix.ReasonUnexpectedEOF, postfix.ReasonTimeout, postfix.ReasonReadError,
		"milter " + milter.ReasonEmptyPacket, "milter " + milter.ReasonPacketTooLarge, "milter " + milter.ReasonTimeout}
	d.metrics.Preset(kinds, reasons)
	d.presetLimitMetrics()
}

// presetLimitMetrics makes the decisions (and quarantined) counts of
// every running limit exist at zero.
func (d *Daemon) presetLimitMetrics() {
	for _, l := range d.engine.Limits() {
		d.metrics.PresetDecision(l.Name, l.Action)
		if d.q.svc != nil && (l.Action == "hold" || l.Action == "freeze") {
			d.q.svc.PresetLimit(l.Name, l.Action)
		}
	}
}

// frontEnds remembers when an MTA last connected to each front-end
// listener, for status.
type frontEnds struct {
	mu   sync.Mutex
	list []*seenListener
}

// seenListener is a listener that records each accepted connection.
type seenListener struct {
	net.Listener
	frontEnd string // "policy" or "milter"
	name     string
	last     atomic.Int64
	count    atomic.Int64
}

// Accept records the time of each accepted connection.
func (l *seenListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.last.Store(time.Now().UnixNano())
		l.count.Add(1)
	}
	return c, err
}

// watch returns l, recording its connections under frontEnd.
func (f *frontEnds) watch(l net.Listener, frontEnd string) net.Listener {
	s := &seenListener{Listener: l, frontEnd: frontEnd, name: srvconn.Name(l)}
	f.mu.Lock()
	f.list = append(f.list, s)
	f.mu.Unlock()
	return s
}

// status returns each watched listener's connections, in watch order.
func (f *frontEnds) status() []admin.FrontEndStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]admin.FrontEndStatus, 0, len(f.list))
	for _, s := range f.list {
		st := admin.FrontEndStatus{FrontEnd: s.frontEnd, Listen: s.name, Connections: s.count.Load()}
		if ns := s.last.Load(); ns != 0 {
			st.LastConnect = time.Unix(0, ns)
		}
		out = append(out, st)
	}
	return out
}

// Decide is both front ends' Decider: evaluate, then the decision's side
// effects, each once: metrics, notification, event, outcome join, hold
// record (the milter's through milterQuarantine.Hold).
func (d *Daemon) Decide(ctx context.Context, req *policy.Request) policy.Decision {
	now := req.Received
	if now.IsZero() {
		now = time.Now()
	}
	dec := d.engine.Evaluate(ctx, now, req)
	d.redisFault(&dec)
	d.metrics.Observe(req, &dec)
	d.notifyRefusal(req, &dec)
	d.recordDecision(now, req, &dec)
	d.joinSubmission(ctx, now, req, &dec)
	if req.Stage != policy.ViaMilter {
		if dec.Action == policy.Hold || dec.Action == policy.Freeze {
			d.recordHold(ctx, req, nil, &dec)
		} else if req.ProtocolState == policy.StateEndOfMessage {
			d.q.svc.Record(ctx, lifecycle.Message{Request: req}, &policy.Decision{}) // a held entry's queue ID
		}
	}
	return dec
}

// policyConfig is f's policy configuration for the daemon's engine:
// without Measures, and with the running [store]'s on_redis_error.
func (d *Daemon) policyConfig(f *config.File) policy.Config {
	pc := f.PolicyConfig()
	pc.OmitMeasures = true
	if s := d.cfg.Store; s.Redis() && s.OnRedisError == "defer" {
		pc.DeferOnUnavailable = redisstore.ErrUnavailable
	}
	return pc
}

// redisFault counts a decision Redis could not make (answered by the
// engine's fault table), logged at most every 10 s.
func (d *Daemon) redisFault(dec *policy.Decision) {
	if d.redis == nil || dec.Fault == nil || !errors.Is(dec.Fault, redisstore.ErrUnavailable) {
		return
	}
	d.metrics.Fault("redis unavailable")
	d.redisLog.Warn("request decided per on_redis_error: redis unavailable", "on_redis_error", d.cfg.Store.OnRedisError,
		"err", dec.Fault)
	dec.Fault = nil
}

// frontEndMetrics feeds a front end's counts into the daemon metrics,
// labels prefixed ("milter " or "").
type frontEndMetrics struct {
	m      *metrics.Metrics
	prefix string
}

func (f frontEndMetrics) Decision(_ string, _ policy.Action, took time.Duration) { f.m.Latency(took) }
func (f frontEndMetrics) BadInput(reason string)                                 { f.m.Bad(f.prefix + reason) }
func (f frontEndMetrics) Fault(kind string)                                      { f.m.Fault(f.prefix + kind) }
