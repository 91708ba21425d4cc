package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

type metrics struct {
	quarantined  *prometheus.CounterVec // limit, action
	keyAlerts    prometheus.Counter
	badQueueIDs  prometheus.Counter
	failures     *prometheus.CounterVec // what
	expired      *prometheus.CounterVec // outcome
	keptPastAge  prometheus.Gauge
	autoReleased prometheus.Counter
}

func newMetrics() metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	vec := func(name, help string, labels []string, preset ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		for _, p := range preset { // at zero, so that alerts see the first
			v.WithLabelValues(p)
		}
		return v
	}
	return metrics{
		quarantined: vec("ratelimitd_quarantined_total", "Messages held or frozen, by limit and action.", []string{"limit", "action"}),
		keyAlerts: counter("ratelimitd_quarantine_key_alerts_total",
			"Times a key started being held/frozen, or its quarantined count reached another multiple of quarantine.alert_every."),
		badQueueIDs: counter("ratelimitd_quarantine_invalid_queue_ids_total",
			"Queue IDs refused because they are not in Postfix's or Exim's syntax or another quarantined message has them already (forged policy requests); the entry is recorded without one."),
		failures: vec("ratelimitd_quarantine_failures_total",
			"Failed quarantine operations: record, release, schedule (postqueue -i), reinject, delete, expire, dsn, store, queue_list, verify (a queue ID the MTA's hold queue does not confirm).",
			[]string{"operation"}, "record", "release", "schedule", "reinject", "delete", "expire", "dsn", "store", "list",
			"queue_list", "verify", "auto-release"),
		expired: vec("ratelimitd_quarantine_expired_total",
			"Held or frozen messages past quarantine.max_age, by outcome: bounced, deleted_null_sender, kept, failed.",
			[]string{"outcome"}, "bounced", "deleted_null_sender", "kept", "failed"),
		keptPastAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_kept_past_max_age",
			Help: "Held or frozen messages past quarantine.max_age still kept at the last expiry run (expire_action keep, no queue ID, or a failed bounce)."}),
		autoReleased: counter("ratelimitd_quarantine_auto_released_total", "Messages released automatically (auto_release = \"drip\")."),
	}
}

// PresetLimit makes ratelimitd_quarantined_total{limit, action} exist at
// zero before the limit's first hold or freeze; safe for concurrent use.
func (s *Service) PresetLimit(limit, action string) { s.m.quarantined.WithLabelValues(limit, action) }

// Collectors returns the quarantine's Prometheus collectors.
func (s *Service) Collectors() []prometheus.Collector {
	stat := func(name, help string, f func(quarantine.Stats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			st, err := s.q.Stats()
			if err != nil {
				return -1
			}
			return float64(f(st))
		})
	}
	m := s.m
	return []prometheus.Collector{m.quarantined, m.keyAlerts, m.badQueueIDs, m.failures, m.expired, m.keptPastAge, m.autoReleased,
		stat("ratelimitd_quarantine_frozen_messages", "Frozen messages waiting for review.",
			func(st quarantine.Stats) int64 { return int64(st.Frozen) }),
		stat("ratelimitd_quarantine_held_messages", "Messages in the MTA hold queue recorded for review.",
			func(st quarantine.Stats) int64 { return int64(st.Held) }),
		stat("ratelimitd_quarantine_bytes", "Bytes of frozen messages stored.", func(st quarantine.Stats) int64 { return st.Bytes }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_max_key_messages", Help: "Quarantined messages of the key with the most."},
			func() float64 {
				s.mu.Lock()
				defer s.mu.Unlock()
				n := 0
				for _, c := range s.pending {
					n = max(n, c)
				}
				return float64(n)
			}),
	}
}
