package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Freeze implements milter.Quarantine: the message is committed (fsync)
// before Freeze returns.
func (s *quarantineService) Freeze(_ context.Context, m *milter.Message, d policy.Decision) (string, error) {
	e := entryFor(&m.Request, &d, m.Recipients)
	id, err := s.q.Freeze(e, m.Data)
	if err != nil {
		return "", err
	}
	s.recorded(e, "freeze")
	return id, nil
}

// Hold implements milter.Quarantine for messages put on hold by the milter.
func (s *quarantineService) Hold(_ context.Context, m *milter.Message, d policy.Decision) (string, error) {
	e := entryFor(&m.Request, &d, m.Recipients)
	id, err := s.q.Hold(e)
	if err != nil {
		return "", err
	}
	s.recorded(e, "hold")
	return id, nil
}

func (d *daemon) startMilter(ls *[]net.Listener) error {
	m := d.cfg.Milter
	if m.Listen == "" {
		return nil
	}
	var l net.Listener
	var err error
	if path, ok := strings.CutPrefix(m.Listen, "unix:"); ok {
		l, err = srvconn.ListenUnix(path, os.FileMode(d.cfg.Server.Mode()))
	} else {
		l, err = net.Listen("tcp", m.Listen)
	}
	if err != nil {
		return fmt.Errorf("milter listener %s: %w", m.Listen, err)
	}
	*ls = append(*ls, l)
	d.q.milterL = l
	d.listeners = append(d.listeners, "milter "+listenerName(l))
	d.q.milter = &milter.Server{
		Decider:         milter.DeciderFunc(d.decide),
		Quarantine:      d.q.svc,
		Logger:          d.log,
		Metrics:         milterMetrics{d.metrics},
		AllowedNetworks: d.cfg.Server.Networks(),
		ReadTimeout:     time.Duration(m.ReadTimeout),
		MaxMessageSize:  int64(m.MaxMessageSize),
	}
	return nil
}

func (d *daemon) serveMilter() {
	if d.q.milter != nil {
		d.goServe("milter", func() error { return d.q.milter.Serve(d.conns.Listener(d.q.milterL, "milter")) }, milter.ErrServerClosed)
	}
}

func (d *daemon) stopMilter(ctx context.Context) {
	if d.q.milter != nil {
		d.q.milter.Shutdown(ctx)
	}
	d.q.stopExpire()
}

// milterMetrics feeds the milter server's counts into the daemon metrics
// (decisions are observed by daemon.decide).
type milterMetrics struct{ m *metrics }

func (milterMetrics) Conn(bool)                                     {}
func (milterMetrics) ConnDone()                                     {}
func (milterMetrics) Decision(string, policy.Action, time.Duration) {}
func (milterMetrics) Message(policy.Action)                         {}
func (x milterMetrics) BadInput(reason string)                      { x.m.bad("milter " + reason) }
func (x milterMetrics) Fault(kind string)                           { x.m.fault("milter " + kind) }
