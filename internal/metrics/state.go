package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/ratestore"
)

// StateCollectors returns rate state p's flush and key-pressure metrics.
func StateCollectors(p *ratestore.Persistent) []prometheus.Collector {
	stat := func(f func(ratestore.PersistStats) float64) func() float64 {
		return func() float64 { return f(p.Stats()) }
	}
	m := p.Memory()
	counter := func(name, help string, f func() float64) prometheus.Collector { return counterFunc(name, help, nil, f) }
	gauge := func(name, help string, f func() float64) prometheus.Collector { return gaugeFunc(name, help, nil, f) }
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	return []prometheus.Collector{
		counter("ratelimitd_state_flushes_total", "Rate-state flushes to BoltDB committed.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Flushes) })),
		counter("ratelimitd_state_flush_failures_total", "Rate-state flushes to BoltDB that failed (disk full, I/O error); their changes are retried.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Failures) })),
		counter("ratelimitd_state_compaction_failures_total", "Compactions of the rate-state journal that failed; retried after the next flush.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.CompactionFailures) })),
		gauge("ratelimitd_state_pending_changes", "Rate-state changes waiting for a flush after a failed one.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Pending) })),
		gauge("ratelimitd_state_last_flush_timestamp_seconds", "Unix time of the last successful rate-state flush (0: none).",
			stat(func(s ratestore.PersistStats) float64 { return unix(s.LastFlushAt) })),
		gauge("ratelimitd_state_last_error_timestamp_seconds", "Unix time of the last failed rate-state flush or compaction (0: none).",
			stat(func(s ratestore.PersistStats) float64 { return unix(s.LastErrorAt) })),
		counter("ratelimitd_state_keys_lost_total", "Keys of the state file's unreadable records (failing their checksum) set aside at start-up with serve --accept-state-loss.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.LostKeys) })),
		counter("ratelimitd_state_malformed_total", "Stored rate states dropped at start-up as malformed (NaN or infinite rate, wrong length).",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Malformed) })),
		counter("ratelimitd_state_converted_total", "Rate states converted to a limit's changed algorithm, period or half-life.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Converted) })),
		counter("ratelimitd_state_not_converted_total", "Rate states whose conversion to a limit's changed parameters was refused (a NaN in the state, or a result that is not finite: a bug, logged at ERROR); they were kept as they were.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.NotConverted) })),
		gauge("ratelimitd_rate_keys_max", "The bound on rate states held (server.max_keys, rounded to the shard count).",
			func() float64 { return float64(m.Cap()) }),
		counter("ratelimitd_rate_evictions_total", "Rate states evicted to respect max_keys (never one over or near its limit).",
			func() float64 { return float64(m.Evicted()) }),
		counter("ratelimitd_rate_keys_refused_total", "New keys not tracked (answered fail-open) because max_keys was reached and every eviction candidate was over or near its limit.",
			func() float64 { return float64(m.Refused()) }),
		gauge("ratelimitd_rate_key_pressure", "Rate states held as a fraction of max_keys.",
			func() float64 { return float64(m.Len()) / float64(max(m.Cap(), 1)) }),
	}
}
