package daemon

import (
	"context"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/policy"
)

// startMilter opens the [milter] listener, if set, and its server.
func (d *Daemon) startMilter(ls *[]net.Listener, inh *srvconn.Inherited) error {
	m := d.cfg.Milter
	if m.Listen == "" {
		return nil
	}
	// A socket systemd passed for the address is used as it is.
	l, from := inh.Take(m.Listen), " (from systemd)"
	var err error
	if l == nil {
		from = ""
		if path, ok := strings.CutPrefix(m.Listen, "unix:"); ok {
			// The MTA connects as a member of socket_group, like the
			// policy service's unix sockets.
			l, err = srvconn.ListenUnixGroup(path, os.FileMode(d.cfg.Server.Mode()), d.cfg.Server.SocketGroup)
		} else {
			l, err = net.Listen("tcp", m.Listen)
		}
	}
	if err != nil {
		return listenError("milter", m.Listen, err, inh)
	}
	*ls = append(*ls, l)
	d.q.milterL = l
	d.listeners = append(d.listeners, "milter "+listenerName(l)+from)
	d.q.milter = &milter.Server{
		Decider:         d,
		Quarantine:      milterQuarantine{d},
		Logger:          d.log,
		Metrics:         frontEndMetrics{m: d.metrics, prefix: "milter "},
		AllowedNetworks: d.cfg.Server.Networks(),
		ReadTimeout:     time.Duration(m.ReadTimeout),
		MaxMessageSize:  int64(m.MaxMessageSize),
		// Messages kept for freezing spill from memory to files here.
		SpoolDir: d.cfg.Server.StateDir,

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
			return d.q.milter.Serve(d.seen.watch(d.q.milterL, "milter", listenerName(d.q.milterL)))
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
