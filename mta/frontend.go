package mta

import (
	"context"
	"log/slog"

	"github.com/ratelimitd/ratelimitd/policy"
)

// A Decider decides one policy request. It is the seam between a front
// end's protocol and the rate limits: a small adapter around policy's
// Engine.Evaluate, passing the current time, satisfies it.
//
// Decide is called concurrently from the front ends' connection
// goroutines, so it must be safe for concurrent use. ctx carries the
// request's deadline, set by the front end, and is cancelled when the
// front end's server is closed; Decide should return a fail-open Pass with
// Decision.Fault set when it cannot decide in time, and recover its own
// faults the same way. req.Received is the time the front end received the
// request (read once by the front end), which a Decider can decide at
// instead of reading the clock again. Whether the Decider may keep req
// after the call, and what a panic that escapes Decide does, each front
// end documents on its Server: the policy front end reuses *req for the
// next request.
type Decider interface {
	Decide(ctx context.Context, req *policy.Request) policy.Decision
}

// DeciderFunc adapts an ordinary function to the Decider interface.
type DeciderFunc func(ctx context.Context, req *policy.Request) policy.Decision

// Decide calls f(ctx, req).
func (f DeciderFunc) Decide(ctx context.Context, req *policy.Request) policy.Decision {
	return f(ctx, req)
}

// Metrics receives the counts every front end reports. Each front end's
// own Metrics interface embeds it and adds the counts of its protocol.
// Methods are called from the accept and connection goroutines,
// concurrently: they must be safe for concurrent use and must not block.
type Metrics interface {
	// Conn is called once per accepted connection; allowed is false when
	// the connection was refused by the allow-list and closed unread.
	Conn(allowed bool)
	// ConnDone is called when an allowed connection has been closed.
	ConnDone()
	// BadInput is called when a connection is closed without a reply
	// because of its input; reason is one of the front end's Reason
	// constants.
	BadInput(reason string)
	// Fault is called for every panic, every Decision with Fault set and,
	// in the milter, every quarantine failure; kind is one of the Fault
	// constants of this package.
	Fault(kind string)
}

// Kinds passed to Metrics.Fault.
const (
	// FaultPanic: Decide, or the front end's own code, panicked. The
	// policy front end answers DUNNO; the milter temp-fails the command
	// and closes the connection.
	FaultPanic = "panic"
	// FaultDecision: Decide returned a Decision with Fault set (normally
	// a fail-open Pass); it is applied as usual.
	FaultDecision = "decision"
	// FaultHoldRecord (milter): Quarantine.Hold failed. The message is
	// held by the MTA all the same, without a quarantine record.
	FaultHoldRecord = "hold_record"
	// FaultFreeze (milter): the message could not be frozen (the
	// quarantine failed or is missing, or the message is larger than the
	// server's MaxMessageSize); it was temp-failed, never discarded.
	FaultFreeze = "freeze"
	// FaultNoQuarantineAction (milter): a Hold was decided but the MTA
	// did not offer the quarantine action (SMFIF_QUARANTINE) in the
	// option negotiation; the message was temp-failed instead.
	FaultNoQuarantineAction = "no_quarantine_action"
	// FaultSpool (milter): a message kept for freezing could not be
	// written to its spool file (the spool directory full or
	// unwritable). The message goes on; if it must be frozen it is
	// temp-failed.
	FaultSpool = "spool"
)

// LogDecision logs the decision d on req to log, the connection's logger,
// and counts its fault on m: a Decision with Fault set is logged at Warn
// and counted as FaultDecision; a non-Pass decision is logged at Info with
// the limit, key, rate, max, retry-after and reason; a Pass only at Debug.
// A nil m means the caller has already logged and counted the fault (the
// fail-open decision that replaced a panic in Decide): only the action is
// logged.
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
