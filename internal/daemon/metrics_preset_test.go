package daemon

import (
	"os"
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestMetricsExistFromStart: a daemon that has answered nothing exports
// every metric family the alert rules and the dashboard use (the Redis
// ones need the Redis backend), each labelled counter with its label
// values at zero, so increase() sees the first fault, failure or drop; a
// limit added by a reload gets its decision series at once.
func TestMetricsExistFromStart(t *testing.T) {
	dir := t.TempDir()
	limits := "[[limit]]\nname = \"hourly\"\nkey = [\"sasl_username\"]\nlimit = 10\nperiod = \"1h\"\n" +
		"[[limit]]\nname = \"frozen\"\nkey = [\"sasl_username\"]\nlimit = 100\nperiod = \"1h\"\naction = \"freeze\"\n"
	path := testConfig(t, dir, loopback(t), limits)
	td := startTestDaemon(t, path)
	fams := gatherFamilies(t, td)

	for _, file := range []string{"../../docs/prometheus/alerts.yml", "../../docs/grafana/ratelimitd.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`ratelimitd_[a-z_]+`).FindAllString(string(b), -1) {
			if strings.HasPrefix(name, "ratelimitd_redis_") {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if fams[name] == nil && fams[base] == nil {
				t.Errorf("%s (used in %s) is not exported before its first event", name, file)
			}
		}
	}
	for _, want := range []struct{ family, label, value string }{
		{"ratelimitd_faults_total", "kind", "panic"},
		{"ratelimitd_faults_total", "kind", "milter freeze"},
		{"ratelimitd_faults_total", "kind", "reload"},
		{"ratelimitd_faults_total", "kind", "rate state flush"},
		{"ratelimitd_bad_input_total", "reason", "malformed"},
		{"ratelimitd_bad_input_total", "reason", "milter timeout"},
		{"ratelimitd_connections_refused_total", "listener", "policy"},
		{"ratelimitd_connections_refused_total", "listener", "milter"},
		{"ratelimitd_quarantine_failures_total", "operation", "record"},
		{"ratelimitd_quarantine_failures_total", "operation", "delete"},
		{"ratelimitd_quarantine_failures_total", "operation", "expire"},
		{"ratelimitd_quarantine_expired_total", "outcome", "bounced"},
		{"ratelimitd_notify_failed_total", "channel", "webhook"},
		{"ratelimitd_notify_failed_total", "channel", "mail"},
		{"ratelimitd_notify_dropped_total", "reason", "queue_full"},
		{"ratelimitd_notify_dropped_total", "reason", "dedup_full"},
		{"ratelimitd_decisions_total", "limit", "hourly"},
		{"ratelimitd_decisions_total", "limit", "frozen"},
		{"ratelimitd_quarantined_total", "limit", "frozen"},
	} {
		if !hasZeroSeries(fams[want.family], want.label, want.value) {
			t.Errorf("%s{%s=%q} is not exported at 0", want.family, want.label, want.value)
		}
	}

	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = append(text, "\n[[limit]]\nname = \"added\"\nkey = [\"sender\"]\nlimit = 5\nperiod = \"1h\"\naction = \"reject\"\n"...)
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	td.Reload()
	if fams := gatherFamilies(t, td); !hasZeroSeries(fams["ratelimitd_decisions_total"], "action", "reject") {
		t.Errorf("after a reload adding a reject limit, no ratelimitd_decisions_total{action=\"reject\"} at 0:\n%s", td.logs.String())
	}
}

func gatherFamilies(t *testing.T, td *testDaemon) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := td.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	return fams
}

// hasZeroSeries reports whether mf has a counter series with label = value
// at 0.
func hasZeroSeries(mf *dto.MetricFamily, label, value string) bool {
	if mf == nil {
		return false
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && l.GetValue() == value && m.GetCounter() != nil && m.GetCounter().GetValue() == 0 {
				return true
			}
		}
	}
	return false
}
