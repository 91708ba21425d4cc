package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/events"
)

// EventCollectors returns event log l's metrics; class "refusal" is the
// refusals and warnings (events.Decisions), class "action" every other
// event. Nil l: every value 0, so the families are present from start.
func EventCollectors(l *events.Log) []prometheus.Collector {
	stat := func(f func(events.Stats) uint64) func() float64 {
		return func() float64 { return float64(f(l.Stats())) }
	}
	counter := func(name, help, class string, f func(events.Stats) uint64) prometheus.Collector {
		var labels prometheus.Labels
		if class != "" {
			labels = prometheus.Labels{"class": class}
		}
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, stat(f))
	}
	gauge := func(name, help, class string, f func(events.Stats) int) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{"class": class}},
			func() float64 { return float64(f(l.Stats())) })
	}
	const (
		dropped = "Events lost before they were written: the queue was full, or the log read-only or closed."
		pruned  = "Stored events deleted by [events] max_age and max_count (refusal) or actions_max_age and actions_max_count (action)."
		stored  = "Events in the state file."
	)
	return []prometheus.Collector{
		counter("ratelimitd_events_dropped_total", dropped, "refusal", func(s events.Stats) uint64 { return s.Dropped - s.ActionsDropped }),
		counter("ratelimitd_events_dropped_total", dropped, "action", func(s events.Stats) uint64 { return s.ActionsDropped }),
		counter("ratelimitd_events_pruned_total", pruned, "refusal", func(s events.Stats) uint64 { return s.Pruned }),
		counter("ratelimitd_events_pruned_total", pruned, "action", func(s events.Stats) uint64 { return s.ActionsPruned }),
		counter("ratelimitd_events_coalesced_total", "Refusals and warnings added to the count of an event of the same key, limit and action in the same [events] coalesce interval.", "",
			func(s events.Stats) uint64 { return s.Coalesced }),
		counter("ratelimitd_events_flush_failures_total", "Event-log flushes to BoltDB that failed; their events are retried.", "",
			func(s events.Stats) uint64 { return s.Failures }),
		gauge("ratelimitd_events_stored", stored, "refusal", func(s events.Stats) int { return s.Stored }),
		gauge("ratelimitd_events_stored", stored, "action", func(s events.Stats) int { return s.ActionsStored }),
	}
}
