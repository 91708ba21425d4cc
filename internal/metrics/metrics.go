package metrics

import (
	"math/rand/v2"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/policy"
)

// knownStates have pre-bound counters; others count as "OTHER".
var knownStates = [numStates]string{policy.StateConnect, policy.StateHELO, policy.StateEHLO, policy.StateMail,
	policy.StateRcpt, policy.StateData, policy.StateEndOfMessage, policy.StateVrfy, policy.StateEtrn, "OTHER"}

const numActions = int(policy.Reject) + 1

// Metrics are the daemon's Prometheus metrics and the counters `status`
// prints; make them with New; safe for concurrent use. The per-request
// series are counted in stripes picked at random (docs/performance.md)
// and summed when scraped.
type Metrics struct {
	reg         *prometheus.Registry
	redisRTT    prometheus.Histogram // RegisterRedis
	stripes     [metricStripes]requestStripe
	decisions   *prometheus.CounterVec // limit, action
	faults      *prometheus.CounterVec // kind
	badInput    *prometheus.CounterVec // reason
	connRefused *prometheus.CounterVec // listener, reason

	nFaults atomic.Int64
	nBad    atomic.Int64
	msgs    [numActions]atomic.Int64 // non-pass messages by action, each once
}

const metricStripes = 16

// latencyBuckets are the upper bounds of ratelimitd_decision_seconds.
var latencyBuckets = [...]float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2, 0.1, 1}

// requestStripe is one copy of the per-request counts (bucket counts
// non-cumulative, the last past every bound; sum in nanoseconds).
type requestStripe struct {
	n       [numStates][numActions]atomic.Uint64
	buckets [len(latencyBuckets) + 1]atomic.Uint64
	sumNs   atomic.Uint64
	_       [64]byte // keep stripes off each other's cache lines
}

const numStates = 10 // len(knownStates)

// requestCollector exports the striped counts as Prometheus metrics.
type requestCollector struct {
	m                    *Metrics
	reqDesc, latencyDesc *prometheus.Desc
}

func (c requestCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.reqDesc
	ch <- c.latencyDesc
}

func (c requestCollector) Collect(ch chan<- prometheus.Metric) {
	var n [numStates][numActions]uint64
	var buckets [len(latencyBuckets) + 1]uint64
	var sumNs uint64
	for i := range c.m.stripes {
		st := &c.m.stripes[i]
		for s := range n {
			for a := range n[s] {
				n[s][a] += st.n[s][a].Load()
			}
		}
		for b := range buckets {
			buckets[b] += st.buckets[b].Load()
		}
		sumNs += st.sumNs.Load()
	}
	for s, state := range knownStates {
		for a := range numActions {
			ch <- prometheus.MustNewConstMetric(c.reqDesc, prometheus.CounterValue, float64(n[s][a]), state, policy.Action(a).String())
		}
	}
	cum, total := make(map[float64]uint64, len(latencyBuckets)), uint64(0)
	for b, upper := range latencyBuckets {
		total += buckets[b]
		cum[upper] = total
	}
	total += buckets[len(latencyBuckets)]
	ch <- prometheus.MustNewConstHistogram(c.latencyDesc, total, float64(sumNs)/1e9, cum)
}

// ByAction returns the requests answered per action (policy.Action).
func (m *Metrics) ByAction() (out [numActions]int64) {
	for i := range m.stripes {
		for s := range numStates {
			for a := range numActions {
				out[a] += int64(m.stripes[i].n[s][a].Load())
			}
		}
	}
	return out
}

// New returns the metrics in a new registry with the Go and process collectors.
func New(trackedKeys func() float64) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	reqs := requestCollector{m: m,
		reqDesc: prometheus.NewDesc("ratelimitd_requests_total",
			"Policy requests answered, by protocol_state and action.", []string{"protocol_state", "action"}, nil),
		latencyDesc: prometheus.NewDesc("ratelimitd_decision_seconds",
			"Time to answer one policy request, in seconds: from its first byte to the reply written (policy service), the Decide call (milter).", nil, nil)}
	m.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_decisions_total",
		Help: "Messages refused, held, frozen or marked (non-pass decisions), by the limit that decided and the action; each message once, not again at its later requests (ratelimitd_requests_total counts those).",
	}, []string{"limit", "action"})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_faults_total",
		Help: "Requests answered DUNNO because of an internal fault (store error, panic).",
	}, []string{"kind"})
	m.badInput = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_bad_input_total",
		Help: "Connections closed for malformed policy requests, by reason.",
	}, []string{"reason"})
	tracked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ratelimitd_tracked_keys",
		Help: "Rate states (limit, key pairs) held in memory.",
	}, trackedKeys)
	m.connRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ratelimitd_connections_refused_total",
		Help: "Policy and milter connections closed by their connection budget, by front end (listener) and reason: " +
			"max_connections and max_per_client (a new connection closed at once, every connection in a request), " +
			"evicted (the connection idle longest closed to make room for a new one), " +
			"first_request_timeout (no complete request in time).",
	}, []string{"listener", "reason"})
	for _, fe := range []string{"policy", "milter"} {
		for _, r := range srvconn.Reasons {
			m.connRefused.WithLabelValues(fe, r)
		}
	}
	m.reg.MustRegister(m.connRefused)
	m.reg.MustRegister(reqs, m.decisions, m.faults, m.badInput, tracked,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// WatchConns exports the connection budgets' gauges, by front end
// (listener label: "policy", "milter"); call it once.
func (m *Metrics) WatchConns(budgets map[string]func() srvconn.Stats) {
	for fe, stats := range budgets {
		l := prometheus.Labels{"listener": fe}
		m.reg.MustRegister(gaugeFunc("ratelimitd_connections_open", "Connections open now, by front end.", l,
			of(stats, func(s srvconn.Stats) int { return s.Open })),
			gaugeFunc("ratelimitd_connections_max", "The cap on open connections, by front end (server.max_connections, milter.max_connections).", l,
				of(stats, func(s srvconn.Stats) int { return s.Max })))
	}
}

// stateIndex is s's index in knownStates, or that of "OTHER".
func stateIndex(s string) int {
	if i := slices.Index(knownStates[:numStates-1], s); i >= 0 {
		return i
	}
	return numStates - 1
}

// Observe counts one decision by state and action and, unless Repeated
// or Pass, its message by limit and action.
func (m *Metrics) Observe(req *policy.Request, d *policy.Decision) {
	a := int(d.Action)
	if a >= numActions {
		a = 0
	}
	m.stripes[rand.Uint32()%metricStripes].n[stateIndex(req.ProtocolState)][a].Add(1)
	if d.Action != policy.Pass && !d.Repeated {
		m.msgs[a].Add(1)
		m.decisions.WithLabelValues(d.Limit, d.Action.String()).Inc()
	}
}

// Messages returns the messages decided per non-pass action, each once.
func (m *Metrics) Messages() (out [numActions]int64) {
	for a := range out {
		out[a] = m.msgs[a].Load()
	}
	return out
}

// Latency records one request's time as its front end measured it.
func (m *Metrics) Latency(took time.Duration) {
	st := &m.stripes[rand.Uint32()%metricStripes]
	st.buckets[sort.SearchFloat64s(latencyBuckets[:], took.Seconds())].Add(1)
	st.sumNs.Add(uint64(max(took, 0)))
}

// Fault counts one fault of kind.
func (m *Metrics) Fault(kind string) {
	m.nFaults.Add(1)
	m.faults.WithLabelValues(kind).Inc()
}

// Bad counts one connection closed for malformed input, by reason.
func (m *Metrics) Bad(reason string) {
	m.nBad.Add(1)
	m.badInput.WithLabelValues(reason).Inc()
}

// Registry is the metrics' registry, for promhttp and other collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Faults is the number of faults counted (Fault).
func (m *Metrics) Faults() int64 { return m.nFaults.Load() }

// BadInput is the number of malformed inputs counted (Bad).
func (m *Metrics) BadInput() int64 { return m.nBad.Load() }

// ConnClosed counts a connection of front end listener ("policy",
// "milter") closed by its budget for reason (srvconn.Reasons).
func (m *Metrics) ConnClosed(listener, reason string) {
	m.connRefused.WithLabelValues(listener, reason).Inc()
}

// Preset makes the series of faults by kind and malformed input by reason
// exist at zero, so that increase() sees the first one (an alert on a
// first failure).
func (m *Metrics) Preset(faultKinds, badReasons []string) {
	for _, k := range faultKinds {
		m.faults.WithLabelValues(k)
	}
	for _, r := range badReasons {
		m.badInput.WithLabelValues(r)
	}
}

// PresetDecision makes ratelimitd_decisions_total{limit, action} exist at
// zero (Preset); call it for every configured limit, at start and reload.
func (m *Metrics) PresetDecision(limit, action string) {
	m.decisions.WithLabelValues(limit, action)
}

// counterFunc and gaugeFunc are prometheus.NewCounterFunc and NewGaugeFunc
// with constant labels (nil: none).
func counterFunc(name, help string, labels prometheus.Labels, f func() float64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, f)
}

func gaugeFunc(name, help string, labels prometheus.Labels, f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f)
}

// of returns a function reading field f of stats() as a float64.
func of[S any, T int | int64 | uint64 | float64](stats func() S, f func(S) T) func() float64 {
	return func() float64 { return float64(f(stats())) }
}
