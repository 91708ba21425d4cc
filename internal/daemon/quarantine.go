package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mailout"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// newLifecycle opens the quarantine of db and wires its life cycle, for
// the daemon and the offline CLI; events may be nil.
func newLifecycle(db *bolt.DB, f *config.File, eng *policy.Engine, log *slog.Logger, events lifecycle.Events) (*lifecycle.Service, error) {
	c := f.Quarantine
	q, err := quarantine.New(db, quarantine.Options{MaxSize: int64(c.MaxSize)})
	if err != nil {
		return nil, err
	}
	return lifecycle.New(q, lifecycle.Options{
		Queue: &postfix.Queue{ReleaseCommands: c.ReleaseCommand, ExpireCommands: c.ExpireCommand,
			DeleteCommand: c.DeleteCommand, ShowCommand: c.ShowCommand, ListCommand: *c.QueueListCommand},
		Reinjector:   &mailout.Reinjector{Addr: c.ReinjectAddr, Helo: c.ReinjectHelo},
		MaxAge:       time.Duration(*c.MaxAge),
		KeepThawed:   time.Duration(*c.KeepThawed),
		ExpireAction: lifecycle.ExpireAction(c.ExpireAction),
		AlertEvery:   c.AlertEvery,
		Logger:       log,
		Events:       events,
		DripLimits:   dripLimits(f),
		Rates:        eng,
	})
}

// dripLimits names the limits with auto_release = "drip".
func dripLimits(f *config.File) []string {
	var names []string
	for _, l := range f.Limits {
		if l.AutoRelease == "drip" {
			names = append(names, l.Name)
		}
	}
	return names
}

// milterQuarantine is the milter's Quarantine; holds go to Daemon.recordHold.
type milterQuarantine struct{ d *Daemon }

// Freeze implements milter.Quarantine; the message is fsync'd on return.
func (m milterQuarantine) Freeze(ctx context.Context, msg *milter.Message, d policy.Decision) (string, error) {
	d.Action = policy.Freeze
	return m.d.q.svc.Record(ctx, lifecycle.Message{Request: &msg.Request, Recipients: msg.Recipients, Body: msg.Body}, &d)
}

// Hold implements milter.Quarantine.
func (m milterQuarantine) Hold(ctx context.Context, msg *milter.Message, d policy.Decision) policy.Decision {
	m.d.recordHold(ctx, &msg.Request, msg.Recipients, &d)
	return d
}

// quarantineState is the daemon's quarantine and milter front end.
type quarantineState struct {
	svc     *lifecycle.Service
	milter  *milter.Server
	milterL net.Listener
	stopRun context.CancelFunc
}

func (d *Daemon) openQuarantine() error {
	d.qnotify = &quarantineNotify{d: d}
	svc, err := newLifecycle(d.db, d.cfg, d.engine, d.log, d.qnotify)
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	d.q = &quarantineState{svc: svc}
	d.metrics.Registry().MustRegister(svc.Collectors()...)
	ctx, cancel := context.WithCancel(context.Background())
	d.q.stopRun = cancel
	d.wg.Go(func() { svc.Run(ctx, time.Hour, 5*time.Second) })
	return nil
}

// recordHold records a hold durably before the MTA is told; when it
// cannot, *dec becomes 450 4.7.1, counted as hold_record.
func (d *Daemon) recordHold(ctx context.Context, req *policy.Request, recipients []string, dec *policy.Decision) {
	hold, fault := *dec, mta.FaultHoldRecord
	if req.Stage == policy.ViaMilter {
		hold.Action, fault = policy.Hold, "milter "+fault
	}
	_, err := d.q.svc.Record(ctx, lifecycle.Message{Request: req, Recipients: recipients}, &hold) // logs its failure
	if err != nil {
		d.metrics.Fault(fault)
		*dec = policy.Decision{Action: policy.Defer, Code: 450, Enhanced: "4.7.1", Text: "Message cannot be held now, try again later",
			Reason: "hold not recorded (" + dec.Reason + "): " + err.Error(), Limit: dec.Limit, Key: dec.Key,
			Rate: dec.Rate, Max: dec.Max, Period: dec.Period, RetryAfter: dec.RetryAfter, Measures: dec.Measures}
	}
}

// startMilter opens the [milter] listener, if set, and its server.
func (d *Daemon) startMilter(inh srvconn.Inherited) error {
	m := d.cfg.Milter
	if m.Listen == "" {
		return nil
	}
	l, err := d.listenMTA("milter", m.Listen, inh)
	if err != nil {
		return err
	}
	d.q.milterL = l
	d.q.milter = &milter.Server{
		Decider:         d,
		Quarantine:      milterQuarantine{d},
		Logger:          d.log,
		Metrics:         frontEndMetrics{m: d.metrics, prefix: "milter "},
		AllowedNetworks: d.cfg.Server.Networks(),
		ReadTimeout:     time.Duration(m.ReadTimeout),
		MaxMessageSize:  int64(m.MaxMessageSize),
		SpoolDir:        d.cfg.Server.StateDir,

		FirstRequestTimeout: time.Duration(m.FirstRequestTimeout),
		Budget:              d.budget("milter", m.MaxConnections, srvconn.DefaultMilterConns(), m.MaxConnectionsPerClient),
	}
	return nil
}

// MayFreeze implements milter.FreezeAdvisor (policy.Engine.MayFreeze):
// the milter keeps a message only when a freeze limit could apply.
func (d *Daemon) MayFreeze(_ context.Context, req *policy.Request) bool {
	return d.engine.MayFreeze(req)
}
