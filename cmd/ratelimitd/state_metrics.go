package main

import (
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/ratestore"
)

// StateStatus is the rate-state part of `ratelimitd status`: the health of
// the write-behind to BoltDB and the pressure on the key bound (max_keys).
type StateStatus struct {
	// LastFlush is when a flush last succeeded, LastFlushAge how long ago
	// (rounded to the second); the zero time means never.
	LastFlush    time.Time `json:"last_flush"`
	LastFlushAge string    `json:"last_flush_age"`
	// LastError is the last failed flush's or compaction's error, at
	// LastErrorAt; empty when none failed since the start.
	LastError          string    `json:"last_error,omitempty"`
	LastErrorAt        time.Time `json:"last_error_at"`
	FlushFailures      int64     `json:"flush_failures"`
	CompactionFailures int64     `json:"compaction_failures"`
	// Pending is how many changes wait for a flush after a failed one.
	Pending int `json:"pending"`
	// MaxKeys is the bound on (limit, key) pairs; Evicted how many were
	// evicted to respect it; Refused how many new keys were refused (fail
	// open) because every evictable candidate was over or near its limit.
	MaxKeys int   `json:"max_keys"`
	Evicted int64 `json:"evicted"`
	Refused int64 `json:"keys_refused"`
	// Malformed is how many stored states were dropped at start-up as not
	// states (NaN or infinite rate, wrong length); Converted how many were
	// converted to changed limit parameters; Unconfigured how many states
	// of limits the configuration does not name were restored and kept.
	Malformed    int64 `json:"malformed"`
	Converted    int64 `json:"converted"`
	Unconfigured int64 `json:"unconfigured"`
}

func stateStatus(p *ratestore.Persistent) *StateStatus {
	st, m := p.Stats(), p.Memory()
	s := &StateStatus{LastFlush: st.LastFlushAt, LastError: st.LastError, LastErrorAt: st.LastErrorAt,
		FlushFailures: st.Failures, CompactionFailures: st.CompactionFailures, Pending: st.Pending,
		MaxKeys: m.Cap(), Evicted: m.Evicted(), Refused: m.Refused(), Malformed: st.Malformed,
		Converted: st.Converted, Unconfigured: st.Unconfigured, LastFlushAge: "never"}
	if !st.LastFlushAt.IsZero() {
		s.LastFlushAge = time.Since(st.LastFlushAt).Round(time.Second).String()
	}
	return s
}

// print writes s as `ratelimitd status` shows it.
func (s *StateStatus) print(w io.Writer) {
	fmt.Fprintf(w, "rate state: last flush %s ago, %d flush failures, %d compaction failures, %d changes pending\n",
		s.LastFlushAge, s.FlushFailures, s.CompactionFailures, s.Pending)
	if s.LastError != "" {
		fmt.Fprintf(w, "rate state last error (%s): %s\n", s.LastErrorAt.Format(time.RFC3339), s.LastError)
	}
	fmt.Fprintf(w, "rate keys: max %d, evicted %d, new keys refused under pressure %d\n", s.MaxKeys, s.Evicted, s.Refused)
	if s.Malformed+s.Converted+s.Unconfigured > 0 {
		fmt.Fprintf(w, "rate state at start: %d malformed dropped, %d converted to changed limits, %d of unconfigured limits kept\n",
			s.Malformed, s.Converted, s.Unconfigured)
	}
}

// stateCollectors returns the Prometheus metrics of the rate state: flush
// and compaction health, and key pressure.
func stateCollectors(p *ratestore.Persistent) []prometheus.Collector {
	stat := func(f func(ratestore.PersistStats) float64) func() float64 {
		return func() float64 { return f(p.Stats()) }
	}
	m := p.Memory()
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
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
		counter("ratelimitd_state_malformed_total", "Stored rate states dropped at start-up as malformed (NaN or infinite rate, wrong length).",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Malformed) })),
		counter("ratelimitd_state_converted_total", "Rate states converted to a limit's changed algorithm, period or half-life.",
			stat(func(s ratestore.PersistStats) float64 { return float64(s.Converted) })),
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
