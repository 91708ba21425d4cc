package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/policy"
)

// OutcomeRecorder counts an outcome, and the recipients of a joined
// message, in the outcome limits; *policy.Engine is one.
type OutcomeRecorder interface {
	RecordOutcome(ctx context.Context, now time.Time, req *policy.Request, kind policy.OutcomeKind) (int, error)
	RecordRecipients(ctx context.Context, now time.Time, req *policy.Request, n int) (int, error)
}

// CountOutcomes returns rec counting each outcome it records without a
// store error in ratelimitd_outcome_kinds_total{kind} (bounce,
// unknown_rcpt, deferral). Call it once; safe for concurrent use.
func (m *Metrics) CountOutcomes(rec OutcomeRecorder) OutcomeRecorder {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimitd_outcome_kinds_total",
		Help: "Outcomes counted in the outcome limits, by kind: bounce, unknown_rcpt, deferral."}, []string{"kind"})
	m.reg.MustRegister(v)
	c := kindCounter{rec: rec}
	for k := policy.OutcomeBounce; k <= policy.OutcomeDeferral; k++ {
		c.by[k] = v.WithLabelValues(k.String())
	}
	return c
}

type kindCounter struct {
	rec OutcomeRecorder
	by  [policy.OutcomeDeferral + 1]prometheus.Counter
}

func (c kindCounter) RecordOutcome(ctx context.Context, now time.Time, req *policy.Request, kind policy.OutcomeKind) (int, error) {
	n, err := c.rec.RecordOutcome(ctx, now, req, kind)
	if err == nil && int(kind) < len(c.by) && c.by[kind] != nil {
		c.by[kind].Inc()
	}
	return n, err
}

func (c kindCounter) RecordRecipients(ctx context.Context, now time.Time, req *policy.Request, n int) (int, error) {
	return c.rec.RecordRecipients(ctx, now, req, n)
}
