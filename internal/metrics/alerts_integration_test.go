//go:build integration

package metrics

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// TestAlertRules runs `promtool test rules` (Debian package prometheus) on
// docs/prometheus/alerts_test.yml and checks that every rule of alerts.yml
// has a case there that expects it to fire.
func TestAlertRules(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatal("promtool is not installed: run scripts/deps.sh (make deps)")
	}
	const dir = "../../docs/prometheus"
	rules, err := os.ReadFile(dir + "/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	cases, err := os.ReadFile(dir + "/alerts_test.yml")
	if err != nil {
		t.Fatal(err)
	}
	firing := map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\w+)\n\s+exp_alerts:\n`).FindAllStringSubmatch(string(cases), -1) {
		firing[m[1]] = true
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)$`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 10 {
		t.Fatalf("found %d alert rules in alerts.yml, want them all", len(alerts))
	}
	for _, a := range alerts {
		if !firing[a[1]] {
			t.Errorf("alerts_test.yml has no case in which %s fires", a[1])
		}
	}
	cmd := exec.Command("promtool", "test", "rules", "alerts_test.yml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
