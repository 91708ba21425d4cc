package packaging

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	alertsFile    = "../docs/prometheus/alerts.yml"
	dashboardFile = "../docs/grafana/ratelimitd.json"
)

// TestDashboardQueries checks that docs/grafana/ratelimitd.json is a
// dashboard whose every panel has a query, and that no query groups or
// filters by a label of unbounded cardinality (a sender key).
func TestDashboardQueries(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("dashboard has %d queries, want the panels' (at least 20)", len(exprs))
	}
	for _, e := range exprs {
		if regexp.MustCompile(`\bkey\b`).MatchString(e) {
			t.Errorf("query uses a key label (unbounded): %s", e)
		}
	}
}

// dashboardExprs returns every PromQL query of the dashboard: the panels'
// targets and the template variables' queries.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	var dash any
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(dash)
	for _, p := range dash.(map[string]any)["panels"].([]any) {
		p := p.(map[string]any)
		if p["type"] != "row" && len(p["targets"].([]any)) == 0 {
			t.Errorf("panel %q has no query", p["title"])
		}
	}
	return exprs
}

// alertExprs returns the expr of every rule in the alerts file.
func alertExprs(t *testing.T) []string {
	t.Helper()
	var exprs []string
	for _, l := range strings.Split(readFile(t, alertsFile), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(l), "expr: "); ok {
			exprs = append(exprs, e)
		}
	}
	if len(exprs) == 0 {
		t.Fatalf("no expr: lines in %s", alertsFile)
	}
	return exprs
}

var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promOffsets   = regexp.MustCompile(`\boffset\s+-?[0-9][0-9a-z]*`)
	promGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promKeywords  = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
	grafanaMacros = regexp.MustCompile(`\$\w+`)
)

// metricNames returns the metric names in a PromQL expression (a Grafana
// query may hold $variables): identifiers that are not functions,
// keywords, label names or inside label matchers, ranges or strings. For
// label_values(METRIC, label), METRIC.
func metricNames(expr string) []string {
	if m := regexp.MustCompile(`^label_values\((\w+),`).FindStringSubmatch(expr); m != nil {
		return []string{m[1]}
	}
	e := promStrings.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promOffsets.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	e = grafanaMacros.ReplaceAllString(e, " ")
	var names []string
	for _, m := range promIdent.FindAllStringSubmatch(e, -1) {
		if m[1] != "" { // a function call
			continue
		}
		if !slices.Contains(promKeywords, strings.ToLower(m[0])) {
			names = append(names, m[0])
		}
	}
	return names
}

// TestMetricNames checks metricNames on the expression forms the
// monitoring files use.
func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (limit, action) (rate(ratelimitd_decisions_total{instance=~"$instance"}[$__rate_interval]))`:    {"ratelimitd_decisions_total"},
		`time() - max by (instance) (ratelimitd_state_last_flush_timestamp_seconds{instance=~"$instance"} > 0)`: {"ratelimitd_state_last_flush_timestamp_seconds"},
		`delta(a_b[1h]) + delta(c_d[1h]) > 20`:                       {"a_b", "c_d"},
		`up{job="ratelimitd"} == 0`:                                  {"up"},
		`label_values(ratelimitd_requests_total, instance)`:          {"ratelimitd_requests_total"},
		`histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))`: {"x_bucket"},
		`a unless on (instance) b offset 1h`:                         {"a", "b"},
	} {
		if got := metricNames(expr); !slices.Equal(got, want) {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
