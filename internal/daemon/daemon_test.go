package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/policy"
)

func TestReloadRefusesInvalidConfig(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), "")
	td := startTestDaemon(t, cfgPath)
	good, _ := os.ReadFile(cfgPath)
	if err := os.WriteFile(cfgPath, append(good, []byte("\n[[limit]]\nname = \"broken\"\nmode = \"sloppy\"\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	td.Reload()
	if n := len(td.engine.Limits()); n != 2 {
		t.Fatalf("invalid reload changed the limits: %d", n)
	}
	if !strings.Contains(td.logs.String(), "reload refused") {
		t.Fatalf("refusal not logged:\n%s", td.logs.String())
	}
	lower := strings.Replace(string(good), "limit = 200", "limit = 2", 1)
	os.WriteFile(cfgPath, []byte(lower), 0o644)
	td.Reload()
	for i := 0; i < 2; i++ {
		if got := td.message("rex", "END-OF-MESSAGE"); got != "action=DUNNO" {
			t.Fatalf("message %d: %s", i+1, got)
		}
	}
	if got := td.message("rex", "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") {
		t.Fatalf("after reload to 2/hour, third message: %s", got)
	}
}

// A reload with an empty file (or one without limits) is refused: the
// running limits stay; limits = "none" said explicitly is accepted, and
// logged.
func TestReloadRefusesLimitlessConfig(t *testing.T) {
	dir := t.TempDir()
	cfgPath := testConfig(t, dir, loopback(t), "")
	td := startTestDaemon(t, cfgPath)
	for _, text := range []string{"", "[server]\nstate_dir = \"" + filepath.Join(dir, "state") + "\"\n"} {
		os.WriteFile(cfgPath, []byte(text), 0o644)
		td.Reload()
		if n := len(td.engine.Limits()); n != 2 {
			t.Fatalf("reload with %q left %d limits, want the running 2", text, n)
		}
	}
	logs := td.logs.String()
	if !strings.Contains(logs, "reload refused") || !strings.Contains(logs, "no [[limit]] table") {
		t.Fatalf("refusal not logged with its cause:\n%s", logs)
	}
	if strings.Contains(logs, "configuration reloaded") {
		t.Fatalf("a limit-less file was reported as reloaded:\n%s", logs)
	}
	os.WriteFile(cfgPath, []byte("[policy]\nlimits = \"none\"\n[server]\nstate_dir = \""+filepath.Join(dir, "state")+"\"\n"), 0o644)
	td.Reload()
	if n := len(td.engine.Limits()); n != 0 || !strings.Contains(td.logs.String(), "running without limits") {
		t.Fatalf("reload to limits = \"none\": %d limits; log:\n%s", n, td.logs.String())
	}
}

// Reload and the admin status handler run concurrently without a data race
// on the configuration (run with -race).
func TestReloadAndStatusRace(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), "")
	td := startTestDaemon(t, cfgPath)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range 20 {
			td.Reload()
		}
	}()
	go func() {
		defer wg.Done()
		for range 20 {
			if st := td.adminStatus(); st.Config != cfgPath {
				t.Errorf("status config %q, want %q", st.Config, cfgPath)
				return
			}
		}
	}()
	wg.Wait()
}

// After a reload that changes admin_socket, shutdown removes only the
// socket it created, never what is at the new path.
func TestShutdownKeepsFileAtReloadedAdminSocket(t *testing.T) {
	dir := t.TempDir()
	cfgPath := testConfig(t, dir, loopback(t), "")
	td := startTestDaemon(t, cfgPath)
	running := td.cfg.Server.AdminSocket
	other := filepath.Join(dir, "precious")
	os.WriteFile(other, []byte("not ours"), 0o600)
	text, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, []byte(strings.Replace(string(text), "[server]\n", fmt.Sprintf("[server]\nadmin_socket = %q\n", other), 1)), 0o644)
	td.Reload()
	td.stop()
	if b, err := os.ReadFile(other); err != nil || string(b) != "not ours" {
		t.Fatalf("shutdown removed the file at the reloaded admin_socket: %q %v", b, err)
	}
	if _, err := os.Lstat(running); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("shutdown left its own admin socket: %v", err)
	}
}

// The admin, milter and unix policy listeners refuse to remove a file that
// is not a socket, and a live socket means another daemon is running.
func TestListenersNeverRemoveNonSockets(t *testing.T) {
	for _, tc := range []struct{ name, extra string }{
		{"admin", "admin_socket = %q\n"},
		{"milter", "\n[milter]\nlisten = \"unix:%s\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "precious")
			os.WriteFile(file, []byte("keep"), 0o600)
			cfgPath := testConfig(t, dir, loopback(t), "")
			text, _ := os.ReadFile(cfgPath)
			extra := fmt.Sprintf(tc.extra, file)
			if tc.name == "admin" {
				text = []byte(strings.Replace(string(text), "[server]\n", "[server]\n"+extra, 1))
			} else {
				text = append(text, extra...)
			}
			os.WriteFile(cfgPath, text, 0o644)
			if err := tryStart(t, cfgPath); !errors.Is(err, srvconn.ErrNotSocket) {
				t.Errorf("start with a regular file at the %s socket path: %v, want ErrNotSocket", tc.name, err)
			}
			if b, rerr := os.ReadFile(file); rerr != nil || string(b) != "keep" {
				t.Fatalf("the file at the %s socket path was removed: %q %v", tc.name, b, rerr)
			}
		})
	}
	t.Run("policy", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "precious")
		os.WriteFile(file, []byte("keep"), 0o600)
		if err := tryStart(t, testConfig(t, dir, "unix:"+file, "")); err == nil {
			t.Errorf("started over a regular file at the policy socket path")
		}
		if b, rerr := os.ReadFile(file); rerr != nil || string(b) != "keep" {
			t.Fatalf("the file at the policy socket path was removed: %q %v", b, rerr)
		}
	})
}

// tryStart starts a daemon on the configuration at cfgPath and returns
// Start's error; a daemon that did start is shut down at once.
func tryStart(t *testing.T, cfgPath string) error {
	t.Helper()
	f, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Start(f, cfgPath, &mtatest.SyncBuffer{}, Options{})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		d.Shutdown(ctx)
		cancel()
	}
	return err
}

// A second daemon on the same milter socket is refused as "already
// running" and leaves the first one's socket working.
func TestMilterSocketOfRunningDaemon(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "milter.sock")
	extra := fmt.Sprintf("\n[milter]\nlisten = \"unix:%s\"\n", sock)
	startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), extra))
	err := tryStart(t, testConfig(t, t.TempDir(), loopback(t), extra))
	if !errors.Is(err, srvconn.ErrSocketInUse) || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second daemon on a live milter socket: %v", err)
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("the running daemon's milter socket is gone: %v", err)
	}
}

// MayFreeze is true only when a freeze limit measured through the milter
// has its key in the request.
func TestMilterMayFreeze(t *testing.T) {
	freeze := `
[[limit]]
name = "mua"
key = ["sasl_username"]
limit = 10
period = "1h"
mode = "strict"
action = "freeze"
via = ["milter"]
`
	user := &policy.Request{Stage: policy.ViaMilter, SASLUsername: "alice", Sender: "alice@example.org", RecipientCount: 1}
	anon := &policy.Request{Stage: policy.ViaMilter, Sender: "bob@example.org", ClientAddress: "192.0.2.1", RecipientCount: 1}
	for _, tc := range []struct {
		name, limits string
		req          *policy.Request
		want         bool
	}{
		{"no freeze limit", "", user, false},
		{"freeze limit, key present", freeze, user, true},
		{"freeze limit, key missing", freeze, anon, false},
		{"freeze limit for policy only", strings.Replace(freeze, `via = ["milter"]`, `via = ["policy"]`, 1), user, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), tc.limits))
			if got := td.MayFreeze(t.Context(), tc.req); got != tc.want {
				t.Fatalf("MayFreeze = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMetricsEndpoint(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), "")
	maddr := serveMetrics(t, cfgPath)
	td := startTestDaemon(t, cfgPath)
	td.message("sue", "RCPT")
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ratelimitd_requests_total{action="pass",protocol_state="RCPT"} 1`,
		"ratelimitd_decision_seconds_bucket", "ratelimitd_tracked_keys", "ratelimitd_quarantine_frozen_messages 0"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A reload that changes settings only a restart applies says so in the log
// and in status, instead of silently keeping the old ones.
func TestReloadNamesSettingsNeedingRestart(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), "")
	td := startTestDaemon(t, cfgPath)
	if st := td.adminStatus(); len(st.RestartNeeded) != 0 {
		t.Fatalf("fresh daemon needs a restart: %v", st.RestartNeeded)
	}
	text, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, append(text, []byte("\n[quarantine]\nalert_every = 3\nmax_age = \"2d\"\n")...), 0o644)
	td.Reload()
	st := td.adminStatus()
	for _, k := range []string{"quarantine.alert_every", "quarantine.max_age"} {
		if !slices.Contains(st.RestartNeeded, k) {
			t.Errorf("status restart_needed %v lacks %s", st.RestartNeeded, k)
		}
		if !strings.Contains(td.logs.String(), k) {
			t.Errorf("log does not name %s:\n%s", k, td.logs.String())
		}
	}
	if !strings.Contains(td.logs.String(), "restart") {
		t.Errorf("log does not say a restart is needed:\n%s", td.logs.String())
	}
	if out := td.statusText(); !strings.Contains(out, "quarantine.alert_every") {
		t.Errorf("ratelimitd status does not show the pending settings:\n%s", out)
	}
	// Back to the running values: nothing pending.
	os.WriteFile(cfgPath, text, 0o644)
	td.Reload()
	if st := td.adminStatus(); len(st.RestartNeeded) != 0 {
		t.Fatalf("after reverting, restart_needed = %v", st.RestartNeeded)
	}
}

// TestStatusCountsMessagesNotRequests: three deferred messages asked about
// at two RCPTs each read "defer 3" in status, not the 6 requests (before:
// "freeze 6" for 3 frozen messages, the same count of every request of a
// refused message); the requests are still counted, and --json has both.
func TestStatusCountsMessagesNotRequests(t *testing.T) {
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), `
[[limit]]
name = "hourly"
key = "sasl_username"
limit = 1
period = "1h"
mode = "strict"
`))
	for i := range 4 {
		for _, rcpt := range []string{"a@example.net", "b@example.net"} {
			ans := td.ask("protocol_state=RCPT", "sasl_username=carol", "sender=carol@example.org",
				"recipient="+rcpt, fmt.Sprintf("instance=c%d", i))
			if deferred := strings.HasPrefix(ans, "action=450"); deferred != (i > 0) {
				t.Fatalf("message %d to %s: %s", i+1, rcpt, ans)
			}
		}
	}
	if out := td.statusText(); !strings.Contains(out, "requests: 8 (2 passed)\n") || !regexp.MustCompile(`(?m)^  defer +3$`).MatchString(out) {
		t.Errorf("status does not count 3 deferred messages among 8 requests:\n%s", out)
	}
	if st := td.adminStatus(); st.Messages["defer"] != 3 || st.ByAction["defer"] != 6 {
		t.Errorf("status --json: messages %v, decisions (requests) %v", st.Messages, st.ByAction)
	}
}
