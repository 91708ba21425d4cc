//go:build integration

package packaging

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// notExported are the names the monitoring files may use that the daemon
// does not export: Prometheus makes them itself for every target.
var notExported = []string{"up"}

// TestAlertRulesPromtool checks docs/prometheus/alerts.yml with
// `promtool check rules` (Debian package prometheus).
func TestAlertRulesPromtool(t *testing.T) {
	needTool(t, "promtool")
	out, err := exec.Command("promtool", "check", "rules", alertsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", alertsFile, err, out)
	}
	t.Logf("%s", out)
}

// TestMonitoringMetricsExported starts the daemon (Redis backend, a
// webhook that cannot be reached, a limit of one message per hour), makes
// it refuse, fail a notification and refuse a reload, reads /metrics, and
// checks that every metric name used in the dashboard's queries and the
// alert rules' expressions is one the daemon exports.
func TestMonitoringMetricsExported(t *testing.T) {
	used := map[string][]string{} // metric name -> where
	for _, e := range dashboardExprs(t) {
		for _, n := range metricNames(e) {
			used[n] = append(used[n], "dashboard: "+e)
		}
	}
	for _, e := range alertExprs(t) {
		for _, n := range metricNames(e) {
			used[n] = append(used[n], "alert: "+e)
		}
	}
	if len(used) < 25 {
		t.Fatalf("found %d metric names in the dashboard and alerts, want at least 25: %v", len(used), used)
	}

	exported := scrapeBusyDaemon(t)
	var missing []string
	for name, where := range used {
		if !exported[name] && !slices.Contains(notExported, name) {
			missing = append(missing, fmt.Sprintf("%s (in %s)", name, where[0]))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("metric names the daemon does not export:\n%s", strings.Join(missing, "\n"))
	}
}

// scrapeBusyDaemon runs the daemon through what makes every metric family
// appear (labelled counters appear at their first increment: a refusal, a
// hold, a failed, a sent and a dropped notification, malformed input, a
// connection over the cap, a failed quarantine delete, a refused reload)
// and returns the sample names of its /metrics page.
func scrapeBusyDaemon(t *testing.T) map[string]bool {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ratelimitd")
	if out, err := exec.Command(goBinary(t), "build", "-o", bin, "../cmd/ratelimitd").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rds := redistest.Start(t)
	// The webhook fails its first event (500, one attempt) and takes the
	// rest; notify.max_keys = 2 drops the third key's event (dedup_full).
	var hooks atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hooks.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(hook.Close)
	dir := t.TempDir()
	policyAddr := fmt.Sprintf("127.0.0.1:%d", mtatest.FreePort(t))
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", mtatest.FreePort(t))
	conf := fmt.Sprintf(`[server]
policy_listen = [%q]
metrics_listen = %q
state_dir = %q
max_connections = 3

[store]
backend = "redis"
redis_addrs = [%q]

[quarantine]
delete_command = ["false", "{queue_id}"]
queue_list_command = []

[notify]
max_keys = 2

[notify.webhook]
url = "%s/hook"
attempts = 1
timeout = "2s"

[[limit]]
name = "hourly"
key = "sasl_username"
limit = 1
period = "1h"
action = "defer"
overrides = { "dave" = 100 }

[[limit]]
name = "held"
key = "sasl_username"
limit = 1
period = "1h"
mode = "strict"
action = "hold"
overrides = { "alice" = 100, "bob" = 100, "carol" = 100 }
`, policyAddr, metricsAddr, dir, rds.Addr, hook.URL)
	confPath := filepath.Join(dir, "ratelimitd.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", confPath, "--log-file", filepath.Join(dir, "log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("daemon log:\n%s", b)
		}
	})
	waitListening(t, policyAddr)

	// Two messages each from alice, bob and carol: the second is over the
	// limit (a decision and a notification). dave's second message is
	// held at END-OF-MESSAGE.
	for _, login := range []string{"alice", "bob", "carol"} {
		for i, want := range []string{"DUNNO", "450"} {
			if got := policyRequest(t, policyAddr, login, "RCPT", ""); !strings.Contains(got, want) {
				t.Fatalf("%s request %d: %q, want %s", login, i+1, got, want)
			}
		}
	}
	for i, want := range []string{"DUNNO", "HOLD"} {
		if got := policyRequest(t, policyAddr, "dave", "END-OF-MESSAGE", fmt.Sprintf("4F3A21C0A%d", i)); !strings.Contains(got, want) {
			t.Fatalf("dave request %d: %q, want %s", i+1, got, want)
		}
	}
	// Deleting dave's held message runs delete_command, which fails.
	out, err := exec.Command(bin, "--config", confPath, "quarantine", "delete", "--key", "dave", "--yes").CombinedOutput()
	t.Logf("quarantine delete (delete_command is false): %v\n%s", err, out)
	// Malformed input.
	if c, err := net.Dial("tcp", policyAddr); err == nil {
		fmt.Fprint(c, "no equals sign here\n\n")
		io.Copy(io.Discard, c)
		c.Close()
	}
	// One connection over max_connections = 3.
	var conns []net.Conn
	for range 4 {
		if c, err := net.Dial("tcp", policyAddr); err == nil {
			conns = append(conns, c)
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A reload of a broken file is refused and counted as a fault.
	if err := os.WriteFile(confPath, []byte("[server\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)

	want := []string{"ratelimitd_decisions_total", "ratelimitd_faults_total", "ratelimitd_bad_input_total",
		"ratelimitd_connections_refused_total", "ratelimitd_notify_failed_total", "ratelimitd_notify_sent_total",
		"ratelimitd_notify_dropped_total", "ratelimitd_quarantined_total", "ratelimitd_quarantine_failures_total"}
	var names map[string]bool
	deadline := time.Now().Add(15 * time.Second)
	for {
		names = scrape(t, "http://"+metricsAddr+"/metrics")
		if !slices.ContainsFunc(want, func(n string) bool { return !names[n] }) || time.Now().After(deadline) {
			break // the caller reports what is missing
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range conns {
		c.Close()
	}
	return names
}

func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not listening on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// policyRequest sends one Postfix policy request (SMTPD_POLICY_README) at
// protocol state state for SASL user login and returns the action line.
func policyRequest(t *testing.T, addr, login, state, queueID string) string {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=%s\nprotocol_name=ESMTP\nclient_address=192.0.2.7\n"+
		"sasl_username=%s\nsender=%s@example.org\nrecipient=bob@example.net\nrecipient_count=1\nqueue_id=%s\ninstance=%d\n\n",
		state, login, login, queueID, time.Now().UnixNano())
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// scrape returns the sample names on a Prometheus text exposition page.
func scrape(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, l := range strings.Split(string(body), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			names[l[:i]] = true
		}
	}
	return names
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s is not installed: run scripts/deps.sh (make deps)", name)
	}
}

// goBinary is the go command that runs this test, for make deb.
func goBinary(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command found for make deb")
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
