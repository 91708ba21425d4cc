package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// RegisterRedis exports the Redis backend's state: degraded, switches,
// time degraded, local decisions by reason, outage merges, round trips.
// Call it once, before the first request.
func (m *Metrics) RegisterRedis(f *redisstore.Failover) {
	m.redisRTT = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ratelimitd_redis_round_trip_seconds",
		Help:    "Round-trip time of the Redis decision script calls that Redis answered.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	local := prometheus.NewDesc("ratelimitd_redis_local_decisions_total",
		"Requests decided with the host's local state because Redis did not answer, by reason: outage (the request's Redis shard was known down), failed (its own Redis call failed).",
		[]string{"reason"}, nil)
	const fastPath = "Requests decided on this host from the Redis records it remembered, by result: confirmed (the script found the records unchanged and stored the new ones), refused (a record had changed, the script decided)."
	m.reg.MustRegister(m.redisRTT, localDecisions{desc: local, f: f},
		counterFunc("ratelimitd_redis_degraded_seconds_total", "Time spent with some of Redis considered down (requests decided per on_redis_error).", nil,
			func() float64 { return f.DegradedTime().Seconds() }),
		counterFunc("ratelimitd_redis_merges_total", "Merges of the counts made locally during an outage into Redis, completed.", nil,
			func() float64 { n, _ := f.Merges(); return float64(n) }),
		counterFunc("ratelimitd_redis_states_merged_total", "Redis states the merges added a host's outage counts to.", nil,
			func() float64 { _, n := f.Merges(); return float64(n) }),
		gaugeFunc("ratelimitd_redis_degraded", "1 while Redis does not answer and requests are decided per on_redis_error, else 0.", nil,
			func() float64 {
				if f.Degraded() {
					return 1
				}
				return 0
			}),
		counterFunc("ratelimitd_redis_outages_total", "Switches from the shared Redis state to on_redis_error.", nil,
			func() float64 { return float64(f.Status().Switches) }),
		counterFunc("ratelimitd_redis_fast_path_total", fastPath, prometheus.Labels{"result": "confirmed"},
			func() float64 { n, _ := f.FastPath(); return float64(n) }),
		counterFunc("ratelimitd_redis_fast_path_total", fastPath, prometheus.Labels{"result": "refused"},
			func() float64 { _, n := f.FastPath(); return float64(n) }),
		counterFunc("ratelimitd_redis_recoveries_total", "Switches back to the shared Redis state after an outage.", nil,
			func() float64 { return float64(f.Status().Recoveries) }),
	)
}

// RedisRoundTrip observes one script call's round trip.
func (m *Metrics) RedisRoundTrip(took time.Duration) {
	if m.redisRTT != nil {
		m.redisRTT.Observe(took.Seconds())
	}
}

// localDecisions exports Failover.LocalDecisions as a counter by reason.
type localDecisions struct {
	desc *prometheus.Desc
	f    *redisstore.Failover
}

func (c localDecisions) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c localDecisions) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range c.f.LocalDecisions() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), reason)
	}
}
