package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/metrics"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

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
