package mta

import (
	"context"
	"log/slog"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// A Decider decides one request (the daemon: policy.Engine.Evaluate and
// its side effects), concurrently, within ctx's deadline. A fault is a
// Pass with Decision.Fault set; a panic is recovered by the front end.
type Decider interface {
	Decide(ctx context.Context, req *policy.Request) policy.Decision
}

// DeciderFunc adapts an ordinary function to the Decider interface.
type DeciderFunc func(ctx context.Context, req *policy.Request) policy.Decision

// Decide calls f(ctx, req).
func (f DeciderFunc) Decide(ctx context.Context, req *policy.Request) policy.Decision {
	return f(ctx, req)
}

// Metrics receives a front end's counts. Called concurrently; must not
// block.
type Metrics interface {
	BadInput(reason string) // closed without a reply; a front end's Reason
	Fault(kind string)      // one of the Fault kinds
	// Decision is called per decision answered, with the time from the
	// request's first byte (milter: the Decide call) to the answer.
	Decision(state string, action policy.Action, elapsed time.Duration)
}

// NoMetrics is a Metrics that counts nothing.
type NoMetrics struct{}

func (NoMetrics) BadInput(string)                               {}
func (NoMetrics) Fault(string)                                  {}
func (NoMetrics) Decision(string, policy.Action, time.Duration) {}

// Kinds passed to Metrics.Fault.
const (
	FaultPanic              = "panic"                // answered DUNNO (policy) or 451 and closed (milter)
	FaultDecision           = "decision"             // Decision.Fault set; applied as usual
	FaultHoldRecord         = "hold_record"          // a hold not recorded: deferred instead
	FaultFreeze             = "freeze"               // a freeze failed: temp-failed, never discarded
	FaultNoQuarantineAction = "no_quarantine_action" // Hold without SMFIF_QUARANTINE: temp-failed
	FaultSpool              = "spool"                // a kept message's spool file failed
)

// LogDecision logs d on req (Warn and FaultDecision counted on m for a
// fault, Info for a non-Pass, Debug for a Pass). A nil m: the fault is
// already logged and counted.
func LogDecision(log *slog.Logger, m Metrics, req *policy.Request, d *policy.Decision) {
	if d.Fault != nil && m != nil {
		log.Warn("decision fault", "fault", d.Fault, "action", d.Action.String(), slog.Any("req", req))
		m.Fault(FaultDecision)
	}
	if d.Action != policy.Pass {
		log.Info("decision", "action", d.Action.String(), "limit", d.Limit, "key", d.Key,
			"rate", d.Rate, "max", d.Max, "retry_after", d.RetryAfter, "reason", d.Reason,
			slog.Any("req", req))
	} else if log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("decision", "action", d.Action.String(), slog.Any("req", req))
	}
}
