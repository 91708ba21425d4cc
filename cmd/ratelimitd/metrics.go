package main

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/policy"
)

// knownStates are the protocol_state values with pre-bound counters; any
// other value is counted as "OTHER" so a client cannot grow label sets.
var knownStates = []string{policy.StateConnect, policy.StateHELO, policy.StateEHLO, policy.StateMail,
	policy.StateRcpt, policy.StateData, policy.StateEndOfMessage, policy.StateVrfy, policy.StateEtrn, "OTHER"}

const numActions = int(policy.Reject) + 1

// metrics are the daemon's Prometheus metrics plus the plain counters that
// `ratelimitd status` prints. Safe for concurrent use.
type metrics struct {
	reg       *prometheus.Registry
	requests  [][numActions]prometheus.Counter // [state][action]
	decisions *prometheus.CounterVec           // limit, action
	faults    *prometheus.CounterVec           // kind
	badInput  *prometheus.CounterVec           // reason
	latency   prometheus.Histogram
	// connRefused counts connections closed over max_connections, by
	// listener (policy, milter).
	connRefused *prometheus.CounterVec

	byAction [numActions]atomic.Int64
	nFaults  atomic.Int64
	nBad     atomic.Int64
}

func newMetrics(trackedKeys func() float64) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_requests_total",
		Help: "Policy requests answered, by protocol_state and action.",
	}, []string{"protocol_state", "action"})
	m.requests = make([][numActions]prometheus.Counter, len(knownStates))
	for i, s := range knownStates {
		for a := range numActions {
			m.requests[i][a] = reqs.WithLabelValues(s, policy.Action(a).String())
		}
	}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_decisions_total",
		Help: "Non-pass decisions, by the limit that decided and the action.",
	}, []string{"limit", "action"})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_faults_total",
		Help: "Requests answered DUNNO because of an internal fault (store error, panic).",
	}, []string{"kind"})
	m.badInput = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_bad_input_total",
		Help: "Connections closed for malformed policy requests, by reason.",
	}, []string{"reason"})
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ratelimitd_decision_seconds",
		Help:    "Time to evaluate one policy request, in seconds.",
		Buckets: []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, 0.1, 1},
	})
	tracked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ratelimitd_tracked_keys",
		Help: "Rate states (limit, key pairs) held in memory.",
	}, trackedKeys)
	m.connRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_connections_refused_total",
		Help: "Connections closed at once because server.max_connections were open, by listener.",
	}, []string{"listener"})
	m.reg.MustRegister(m.connRefused)
	m.reg.MustRegister(reqs, m.decisions, m.faults, m.badInput, m.latency, tracked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// watchConns exports the connection cap's gauges.
func (m *metrics) watchConns(lim *srvconn.Limiter) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ratelimitd_connections_open",
			Help: "Policy and milter connections open now.",
		}, func() float64 { return float64(lim.Open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ratelimitd_connections_max",
			Help: "The cap on open policy and milter connections (server.max_connections).",
		}, func() float64 { return float64(lim.Max()) }))
}

func stateIndex(s string) int {
	for i, k := range knownStates[:len(knownStates)-1] {
		if k == s {
			return i
		}
	}
	return len(knownStates) - 1
}

// observe records one decision.
func (m *metrics) observe(req *policy.Request, d *policy.Decision, took time.Duration) {
	a := int(d.Action)
	if a >= numActions {
		a = 0
	}
	m.requests[stateIndex(req.ProtocolState)][a].Inc()
	m.byAction[a].Add(1)
	m.latency.Observe(took.Seconds())
	if d.Action != policy.Pass {
		m.decisions.WithLabelValues(d.Limit, d.Action.String()).Inc()
	}
}

func (m *metrics) fault(kind string) {
	m.nFaults.Add(1)
	m.faults.WithLabelValues(kind).Inc()
}

func (m *metrics) bad(reason string) {
	m.nBad.Add(1)
	m.badInput.WithLabelValues(reason).Inc()
}
