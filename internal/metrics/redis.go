package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// RegisterRedis exports the Redis backend's state: whether it is degraded
// and how often it switched. Call it once.
func (m *Metrics) RegisterRedis(f *redisstore.Failover) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ratelimitd_redis_degraded",
			Help: "1 while Redis does not answer and requests are decided per on_redis_error, else 0.",
		}, func() float64 {
			if f.Degraded() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ratelimitd_redis_outages_total",
			Help: "Switches from the shared Redis state to on_redis_error.",
		}, func() float64 { return float64(f.Status().Switches) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ratelimitd_redis_recoveries_total",
			Help: "Switches back to the shared Redis state after an outage.",
		}, func() float64 { return float64(f.Status().Recoveries) }),
	)
}
