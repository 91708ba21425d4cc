package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/events"
)

// EventCollectors returns event log l's metrics; class "refusal" is the
// refusals and warnings (events.Decisions), class "action" every other
// event. Nil l: every value 0, so the families are present from start.
func EventCollectors(l *events.Log) []prometheus.Collector {
	refusal, action := prometheus.Labels{"class": "refusal"}, prometheus.Labels{"class": "action"}
	const (
		dropped = "Events lost before they were written: the queue was full, or the log read-only or closed."
		pruned  = "Stored events deleted by [events] max_age and max_count (refusal) or actions_max_age and actions_max_count (action)."
		stored  = "Events in the state file."
	)
	return []prometheus.Collector{
		counterFunc("ratelimitd_events_dropped_total", dropped, refusal, of(l.Stats, func(s events.Stats) uint64 { return s.Dropped - s.ActionsDropped })),
		counterFunc("ratelimitd_events_dropped_total", dropped, action, of(l.Stats, func(s events.Stats) uint64 { return s.ActionsDropped })),
		counterFunc("ratelimitd_events_pruned_total", pruned, refusal, of(l.Stats, func(s events.Stats) uint64 { return s.Pruned })),
		counterFunc("ratelimitd_events_pruned_total", pruned, action, of(l.Stats, func(s events.Stats) uint64 { return s.ActionsPruned })),
		counterFunc("ratelimitd_events_coalesced_total", "Refusals and warnings added to the count of an event of the same key, limit and action in the same [events] coalesce interval.", nil,
			of(l.Stats, func(s events.Stats) uint64 { return s.Coalesced })),
		counterFunc("ratelimitd_events_flush_failures_total", "Event-log flushes to BoltDB that failed; their events are retried.", nil,
			of(l.Stats, func(s events.Stats) uint64 { return s.Failures })),
		gaugeFunc("ratelimitd_events_stored", stored, refusal, of(l.Stats, func(s events.Stats) int { return s.Stored })),
		gaugeFunc("ratelimitd_events_stored", stored, action, of(l.Stats, func(s events.Stats) int { return s.ActionsStored })),
	}
}
