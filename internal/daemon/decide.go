package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/metrics"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Decide is the front ends' Decider (the policy service's and the
// milter's): evaluate, measure, notify, record the
// event (package events) and the holds. A panic answers
// DUNNO with Decision.Fault set (policy.ErrPanic); the front end logs and
// counts faults. Safe for concurrent use.
func (d *Daemon) Decide(ctx context.Context, req *policy.Request) (dec policy.Decision) {
	defer func() {
		if r := recover(); r != nil {
			// Fail open (DUNNO) on our own faults; the front end logs
			// and counts Decision.Fault.
			dec = policy.Decision{Reason: "internal error, failing open", Fault: fmt.Errorf("%w: %v", policy.ErrPanic, r)}
		}
	}()
	// The front ends record when they received the request: the clock is
	// read once per request (a clock read is not free on a VM: see
	// docs/performance.md),
	// and the decision's latency is what they measure (frontEndMetrics).
	now := req.Received
	if now.IsZero() {
		now = time.Now()
	}
	dec = d.engine.Decide(ctx, now, req)
	d.redisDecision(&dec)
	// Faults are logged and counted by the front end's server.
	d.metrics.Observe(req, &dec)
	d.notifyRefusal(req, &dec)
	d.recordDecision(now, req, &dec)
	if req.Stage != policy.ViaMilter {
		if dec.Action == policy.Hold || dec.Action == policy.Freeze {
			d.recordHold(ctx, req, &dec)
		} else if req.ProtocolState == policy.StateEndOfMessage {
			d.q.svc.EndOfMessage(req)
		}
	}
	return dec
}

// frontEndMetrics feeds a front end's counts (mta/postfix's and
// mta/milter's Metrics) into the daemon metrics: the latency of each
// request or Decide, bad input and faults, their labels prefixed with
// prefix ("milter " for the milter, "" for the policy service).
// Decisions are counted by Daemon.Decide; connections and messages are
// not counted.
type frontEndMetrics struct {
	m      *metrics.Metrics
	prefix string
}

func (frontEndMetrics) Conn(bool)                                        {}
func (frontEndMetrics) ConnDone()                                        {}
func (frontEndMetrics) Message(policy.Action)                            {}
func (f frontEndMetrics) Request(_ policy.Action, elapsed time.Duration) { f.m.Latency(elapsed) }
func (f frontEndMetrics) Decision(_ string, _ policy.Action, elapsed time.Duration) {
	f.m.Latency(elapsed)
}
func (f frontEndMetrics) BadInput(reason string) { f.m.Bad(f.prefix + reason) }
func (f frontEndMetrics) Fault(kind string)      { f.m.Fault(f.prefix + kind) }
