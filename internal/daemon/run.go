package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/outcome"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Reload rereads the configuration file; an invalid one is refused, logged
// and counted. Limits apply at once; settings that need a restart are
// logged and shown by status.
func (d *Daemon) Reload() {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	if d.web != nil {
		// Even if the configuration is refused.
		if err := d.web.Reload(); err != nil {
			d.log.Error("console: rereading the users or TLS files failed; the previous ones stay", "err", err)
		}
	}
	f, err := config.Load(d.configPath)
	if err == nil {
		pc := d.policyConfig(f)
		err = d.state.Reconfigure(storeLimits(pc), func() error { return d.engine.Reload(pc) })
	}
	if err != nil {
		d.log.Error("reload refused, keeping the running configuration", "config", d.loaded.Source, "err", err)
		d.metrics.Fault("reload")
		d.recordReload(d.loaded.Source, err)
		return
	}
	d.loaded = f
	d.presetLimitMetrics()
	d.q.svc.SetDripLimits(dripLimits(f)) // auto_release belongs to the [[limit]] stack
	d.restartNeeded = config.RestartKeys(d.cfg, f)
	d.log.Info("configuration reloaded", "config", f.Source, "limits", len(d.engine.Limits()))
	d.recordReload(f.Source, nil)
	d.logConfigNotes(f)
	if len(d.restartNeeded) > 0 {
		d.log.Warn("configuration reloaded: limits applied, but these settings keep their running values until a restart",
			"restart_needed", d.restartNeeded)
	}
}

// Status reports the daemon's state now, as `ratelimitd status` prints it.
func (d *Daemon) Status() admin.Status {
	d.reloadMu.Lock()
	source, restart := d.loaded.Source, slices.Clone(d.restartNeeded)
	d.reloadMu.Unlock()
	st := admin.Status{Version: ReleaseVersion(), Started: d.started, Uptime: time.Since(d.started).Round(time.Second).String(),
		Config: source, RestartNeeded: restart, Listeners: d.listeners, TrackedKeys: d.mem.Len(), ByAction: map[string]int64{},
		Faults: d.metrics.Faults(), BadInput: d.metrics.BadInput(),
		Stages: d.engine.Stages(), MessagesInFlight: d.engine.MessagesOpen(), Advice: d.engine.Advice(),
		Connections: d.connStatus(),
		FrontEnds:   d.seen.status()}
	for a, n := range d.metrics.ByAction() {
		st.Requests += n
		st.ByAction[policy.Action(a).String()] = n
	}
	st.Messages = map[string]int64{}
	for a, n := range d.metrics.Messages() {
		if policy.Action(a) != policy.Pass {
			st.Messages[policy.Action(a).String()] = n
		}
	}
	if d.notifier.Enabled() {
		ns := d.notifier.Stats()
		st.Notify = &ns
	}
	st.State = admin.NewStateStatus(d.state)
	if d.events != nil {
		es := d.events.Stats()
		st.Events = &es
	}
	if d.redis != nil {
		// Redis's TIME, refreshing the offset, only while shared.
		if !d.redis.Degraded() {
			if now, err := d.redisClient.Ping(context.Background()); err == nil {
				st.RedisTime = now
			}
		}
		rs := d.redis.Status()
		st.Store = &rs
	}
	for _, l := range d.engine.Limits() {
		st.Limits = append(st.Limits, fmt.Sprintf("%s: %s/%s per %s by %s, %s, %s", l.Name, human.Number(l.Limit),
			human.Duration(l.Period), l.Per, strings.Join(l.Key, "+"), l.Mode, l.Action))
	}
	if d.q != nil {
		h := d.q.svc.Health()
		st.Quarantine = &h
	}
	return st
}

// Shutdown stops accepting, lets requests finish until ctx is done,
// flushes the state and closes the file; errors joined. Call it once.
func (d *Daemon) Shutdown(ctx context.Context) error {
	var errs []error // nils are dropped by errors.Join
	check := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	check("policy server", d.policy.Shutdown(ctx))
	if d.q.milter != nil {
		d.q.milter.Shutdown(ctx)
	}
	d.q.stopRun() // the quarantine's loop
	if d.metricsSrv != nil {
		d.metricsSrv.Shutdown(ctx)
	}
	d.admin.Shutdown(ctx)
	if d.web != nil {
		d.web.Shutdown(ctx)
	}
	d.qnotify.flushAll()
	check("notifications", d.notifier.Close(ctx))
	if d.stopMemLimit != nil {
		d.stopMemLimit()
	}
	if d.redis != nil {
		d.redis.Close()
		d.redisClient.Close()
	}
	d.stopOutcomeFeeds()
	// The flusher's last flush, then each store's Close flushes the rest.
	d.stopFlusher()
	check("flush rate state", d.state.Close())
	check("flush recipient sets", d.rcpts.Close())
	check("flush events", d.events.Close())
	if d.join != nil {
		if err := d.join.Close(); !errors.Is(err, outcome.ErrClosed) {
			check("flush outcome join", err)
		}
	}
	d.wg.Wait()
	errs = append(errs, d.db.Close())
	d.log.Info("ratelimitd stopped")
	return errors.Join(errs...)
}

// Rates is the rate state the admin API and the console act on: the
// engine, on Redis's clock with Redis.
func (d *Daemon) Rates() admin.Rates {
	if d.redis != nil {
		return redisClock{Rates: d.engine, now: d.redis.RedisTime}
	}
	return d.engine
}

// Quarantine is the quarantine's life cycle.
func (d *Daemon) Quarantine() *lifecycle.Service { return d.q.svc }

// services are the daemon's services as the admin API and the console
// act on them.
func (d *Daemon) services() admin.Local {
	l := admin.Local{RateState: d.Rates(), Quarantine: d.q.svc, Logger: d.log, Notify: func(e notify.Event) { d.notifier.Notify(e) },
		Status: d.Status, Limits: d.engine.Limits}
	if d.events != nil {
		l.Events = d.events
	}
	return l
}
