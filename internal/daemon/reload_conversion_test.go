package daemon

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/policy"
)

// conversionDaemon starts a daemon whose only limit is "hourly" (strict,
// per SASL user, period "1h" and limit given) and sends n messages from
// alice, so that she is refused.
func conversionDaemon(t *testing.T, limit int, n int) *testDaemon {
	t.Helper()
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), fmt.Sprintf(`
[[limit]]
name = "hourly"
key = "sasl_username"
limit = %d
period = "1h"
mode = "strict"
action = "defer"
`, limit)))
	for range n {
		td.message("alice", "END-OF-MESSAGE")
	}
	return td
}

// reloadWith rewrites the daemon's configuration with hourly's period and
// limit replaced, and reloads it.
func reloadWith(t *testing.T, td *testDaemon, period string, limit int) {
	t.Helper()
	b, err := os.ReadFile(td.configPath)
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`period = "[^"]*"`).ReplaceAllString(string(b), fmt.Sprintf("period = %q", period))
	text = regexp.MustCompile(`\nlimit = \d+`).ReplaceAllString(text, fmt.Sprintf("\nlimit = %d", limit))
	if err := os.WriteFile(td.configPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	td.Reload()
	if strings.Contains(td.logs.String(), "reload refused") {
		t.Fatalf("reload to %d/%s refused:\n%s", limit, period, td.logs.String())
	}
}

// rateJSON encodes, as `rate list --json` and `rate show --json alice`
// do, the daemon's rates and alice's, and returns alice's row.
func rateJSON(t *testing.T, td *testDaemon) map[string]any {
	t.Helper()
	all, err := td.admin().Rates(t.Context(), 20, false)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := td.admin().Rate(t.Context(), "alice")
	if err != nil {
		t.Fatal(err)
	}
	var row map[string]any
	for _, kr := range [][]policy.KeyRate{all, alice} {
		var b bytes.Buffer
		if err := cliout.JSONList(&b, cliout.RateRows(kr)); err != nil {
			t.Fatalf("rate --json: %v", err)
		}
		var rows []map[string]any
		if err := json.Unmarshal(b.Bytes(), &rows); err != nil || len(rows) != 1 {
			t.Fatalf("rate --json: %v:\n%s", err, b.String())
		}
		row = rows[0]
	}
	return row
}

// TestReloadRoundTripsKeepTheWait reloads a refused sender's limit between
// 1h and 2h thirty times, as thirty SIGHUPs would: her wait stays what it
// was, and rate show and list --json still answer.
func TestReloadRoundTripsKeepTheWait(t *testing.T) {
	td := conversionDaemon(t, 2, 6)
	before := rateJSON(t, td)["retry_after_seconds"].(float64)
	if before < 1800 {
		t.Fatalf("alice refused for %vs only", before)
	}
	start := time.Now()
	for i := range 30 {
		period := "2h"
		if i%2 == 1 {
			period = "1h"
		}
		reloadWith(t, td, period, 2)
	}
	row := rateJSON(t, td)
	after := row["retry_after_seconds"].(float64)
	if elapsed := time.Since(start).Seconds(); after > before+1 || after < before-elapsed-2 {
		t.Errorf("after 30 reloads alice's wait is %vs, was %vs (%.1fs ago):\n%v", after, before, elapsed, row)
	}
	if got := td.message("alice", "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450") {
		t.Errorf("alice's next message after the reloads: %s", got)
	}
}

// TestRateShowExplainsConversion changes a limit from 5/1h to 3/1m while
// alice is refused for about half an hour: her state is kept as a rate
// per minute of about 3*e^30, which rate show printed in full (and, to
// 3/1s, a rate at the largest float64, which rate show --json failed to
// encode). Now the rate is shown capped, the status says from what and
// when it was converted, with her rate by the old limit, and the JSON is
// finite and exact.
func TestRateShowExplainsConversion(t *testing.T) {
	for _, to := range []string{"1m", "1s"} {
		t.Run(to, func(t *testing.T) {
			td := conversionDaemon(t, 5, 7)
			before := rateJSON(t, td)["retry_after_seconds"].(float64)
			if before < 900 {
				t.Fatalf("alice refused for %vs only", before)
			}
			reloadWith(t, td, to, 3)
			row := rateJSON(t, td)
			// An exponential rate holds a wait of at most about 709
			// periods (math.MaxFloat64 = e^709.78): 11m49s at 1s.
			wait := min(before, 709)
			if to == "1m" {
				wait = before
			}
			if w := row["retry_after_seconds"].(float64); w > wait+1 || w < wait-10 {
				t.Errorf("wait after the change %vs, want %vs (was %vs)", w, wait, before)
			}
			conv, ok := row["converted"].(map[string]any)
			if !ok || conv["from"] != "5/1h" || conv["cause"] != "reload" {
				t.Errorf("rate show --json does not say what alice's state was converted from:\n%v", row)
			}
			out := td.rateShow("alice")
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if len(lines) != 3 || lines[2] != "next message: deferred by hourly" {
				t.Fatalf("rate show: want a heading, one line and the limit that answers:\n%s", out)
			}
			f := strings.Fields(lines[1])
			if len(f) < 6 || f[2] != ">3000" || f[3] != "3" || f[4] != to {
				t.Errorf("rate show: want the rate shown as >3000 of 3 per %s:\n%s", to, out)
			}
			line := regexp.MustCompile(`over: allowed again in (\d\d)m\d*s?; converted at reload \d{4}-\d\d-\d\d \d\d:\d\d:\d\d from 5/1h \(rate [5-9](\.\d)?/1h by it\)$`)
			if !line.MatchString(lines[1]) {
				t.Errorf("rate show: want the wait and the conversion explained, got:\n%s", out)
			}
			if regexp.MustCompile(`\d{7}`).MatchString(out) {
				t.Errorf("rate show prints a number of 7 digits or more:\n%s", out)
			}
		})
	}
}
