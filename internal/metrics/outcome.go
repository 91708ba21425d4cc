package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/outcome"
	"github.com/ratelimitd/ratelimitd/policy"
)

// OutcomeCollectors returns the outcome feeds' counts (sink) and join j's
// size and refusals.
func OutcomeCollectors(sink *outcome.Sink, j *outcome.Join) []prometheus.Collector {
	const outcomes = "Outcomes the feeds reported, by what became of them and kind (bounce, unknown_rcpt, deferral)."
	var cs []prometheus.Collector
	for result, c := range map[string]*outcome.Counts{"counted": &sink.Counted, "unjoined": &sink.Unjoined,
		"repeated": &sink.Repeated, "failed": &sink.Failed} {
		for k := policy.OutcomeBounce; k <= policy.OutcomeDeferral; k++ {
			cs = append(cs, counterFunc("ratelimitd_outcomes_total", outcomes, prometheus.Labels{"result": result, "kind": k.String()},
				func() float64 { return float64(c.Load(k)) }))
		}
	}
	return append(cs,
		gaugeFunc("ratelimitd_outcome_join_messages", "Queue IDs joined to their submission, awaiting outcomes.", nil,
			func() float64 { return float64(j.Len()) }),
		counterFunc("ratelimitd_outcome_join_dropped_total", "Submissions not joined because the join was full (outcome.max_messages): their outcomes are not counted.", nil,
			func() float64 { return float64(j.Dropped()) }))
}
