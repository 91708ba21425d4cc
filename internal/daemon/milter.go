package daemon

import (
	"context"
	"net"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/policy"
)

// startMilter opens the [milter] listener, if set, and its server.
func (d *Daemon) startMilter(ls *[]net.Listener, inh srvconn.Inherited) error {
	m := d.cfg.Milter
	if m.Listen == "" {
		return nil
	}
	l, err := d.listenMTA("milter", m.Listen, inh)
	if err != nil {
		return err
	}
	*ls = append(*ls, l)
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

// serveMilter starts serving the milter, if configured.
func (d *Daemon) serveMilter() {
	if d.q.milter != nil {
		d.goServe("milter", func() error {
			return d.q.milter.Serve(d.seen.watch(d.q.milterL, "milter", srvconn.Name(d.q.milterL)))
		}, milter.ErrServerClosed)
	}
}

// stopMilter drains the milter and stops the quarantine's loop.
func (d *Daemon) stopMilter(ctx context.Context) {
	if d.q.milter != nil {
		d.q.milter.Shutdown(ctx)
	}
	d.q.stopRun()
}
