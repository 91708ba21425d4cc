package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimitd/ratelimitd/policy"
)

// TestMetricsStripesSum checks that the striped per-request counts are
// exported as the sums of every stripe: requests by state and action, and
// the latency histogram's buckets, count and sum.
func TestMetricsStripesSum(t *testing.T) {
	m := New(func() float64 { return 0 })
	rcpt := &policy.Request{ProtocolState: policy.StateRcpt}
	odd := &policy.Request{ProtocolState: "BOGUS"}
	pass, def := &policy.Decision{}, &policy.Decision{Action: policy.Defer, Limit: "hourly"}
	for range 1000 {
		m.Observe(rcpt, pass)
		m.Latency(3 * time.Microsecond) // bucket le=5e-06
	}
	for range 7 {
		m.Observe(odd, def)
		m.Latency(2 * time.Second) // past every bound
	}
	m.Observe(rcpt, pass)
	m.Latency(time.Microsecond) // on a bound: le=1e-06
	want := `
# HELP ratelimitd_decision_seconds Time to answer one policy request, in seconds: from its first byte to the reply written (policy service), the Decide call (milter).
# TYPE ratelimitd_decision_seconds histogram
ratelimitd_decision_seconds_bucket{le="1e-06"} 1
ratelimitd_decision_seconds_bucket{le="2.5e-06"} 1
ratelimitd_decision_seconds_bucket{le="5e-06"} 1001
ratelimitd_decision_seconds_bucket{le="1e-05"} 1001
ratelimitd_decision_seconds_bucket{le="2.5e-05"} 1001
ratelimitd_decision_seconds_bucket{le="5e-05"} 1001
ratelimitd_decision_seconds_bucket{le="0.0001"} 1001
ratelimitd_decision_seconds_bucket{le="0.00025"} 1001
ratelimitd_decision_seconds_bucket{le="0.001"} 1001
ratelimitd_decision_seconds_bucket{le="0.01"} 1001
ratelimitd_decision_seconds_bucket{le="0.1"} 1001
ratelimitd_decision_seconds_bucket{le="1"} 1001
ratelimitd_decision_seconds_bucket{le="+Inf"} 1008
ratelimitd_decision_seconds_sum 14.003001
ratelimitd_decision_seconds_count 1008
`
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), "ratelimitd_decision_seconds"); err != nil {
		t.Error(err)
	}
	mf, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range mf {
		if f.GetName() != "ratelimitd_requests_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			var state, action string
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "protocol_state":
					state = l.GetValue()
				case "action":
					action = l.GetValue()
				}
			}
			got[state+"/"+action] = s.GetCounter().GetValue()
		}
	}
	if got["RCPT/pass"] != 1001 || got["OTHER/defer"] != 7 || got["CONNECT/pass"] != 0 || len(got) != numStates*numActions {
		t.Errorf("ratelimitd_requests_total: RCPT/pass %v, OTHER/defer %v, %d series; want 1001, 7, %d",
			got["RCPT/pass"], got["OTHER/defer"], len(got), numStates*numActions)
	}
	if by := m.ByAction(); by[policy.Pass] != 1001 || by[policy.Defer] != 7 {
		t.Errorf("byAction: pass %d, defer %d; want 1001, 7", by[policy.Pass], by[policy.Defer])
	}
}
