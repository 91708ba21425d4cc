package daemon

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/configs"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// testDaemon is a Daemon started in process; logs collects its log.
type testDaemon struct {
	*Daemon
	t          testing.TB
	configPath string
	policyAddr string
	logs       *mtatest.SyncBuffer
}

// testLimits are the [[limit]] tables of the embedded default
// configuration: 200/h leaky plus 1000/day strict per SASL user.
var testLimits = string(configs.Default[bytes.Index(configs.Default, []byte("\n[[limit]]")):])

// testConfig writes dir/ratelimitd.toml: a [server] listening for policy
// requests on policyAddr (host:port or unix:PATH) with its state in
// dir/state, then extra, then testLimits unless extra has a [[limit]].
func testConfig(t testing.TB, dir, policyAddr, extra string) string {
	t.Helper()
	if !strings.Contains(extra, "[[limit]]") {
		extra += testLimits
	}
	path := filepath.Join(dir, "ratelimitd.toml")
	text := fmt.Sprintf("[server]\npolicy_listen = [%q]\nstate_dir = %q\nmetrics_listen = \"\"\nflush_interval = \"200ms\"\nlog_level = \"debug\"\n%s",
		policyAddr, filepath.Join(dir, "state"), extra)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loopback is a free 127.0.0.1:PORT.
func loopback(t testing.TB) string { return fmt.Sprintf("127.0.0.1:%d", mtatest.FreePort(t)) }

// startTestDaemon starts a daemon on the configuration at path and shuts
// it down at the end of the test.
func startTestDaemon(t testing.TB, path string) *testDaemon {
	t.Helper()
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{t: t, configPath: path, policyAddr: f.Server.PolicyListen[0], logs: &mtatest.SyncBuffer{}}
	if td.Daemon, err = Start(f, path, td.logs, Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(td.stop)
	return td
}

// stop shuts the daemon down (once).
func (td *testDaemon) stop() {
	if td.Daemon == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := td.Shutdown(ctx); err != nil {
		td.t.Errorf("shutdown: %v", err)
	}
	td.Daemon = nil
}

// adminStatus asks the daemon for its status over the admin socket.
func (td *testDaemon) adminStatus() admin.Status {
	td.t.Helper()
	st, err := admin.NewClient(td.cfg.Server.AdminSocket).Status(context.Background())
	if err != nil {
		td.t.Fatal(err)
	}
	return st
}

// ask sends one policy request with attrs (name=value) to the daemon and
// returns the action line.
func (td *testDaemon) ask(attrs ...string) string {
	td.t.Helper()
	return mtatest.PolicyAsk(td.t, td.policyAddr, attrs...)
}

// message asks at protocol state for one message of SASL user.
func (td *testDaemon) message(user, state string) string {
	td.t.Helper()
	return td.ask("protocol_state="+state, "sasl_username="+user, "sender="+user+"@example.org",
		"recipient_count=1", "client_address=192.0.2.9")
}

// serveMetrics sets metrics_listen in the configuration at path to a free
// loopback address and returns it.
func serveMetrics(t testing.TB, path string) string {
	t.Helper()
	addr := loopback(t)
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text = []byte(strings.Replace(string(text), `metrics_listen = ""`, fmt.Sprintf("metrics_listen = %q", addr), 1))
	if err := os.WriteFile(path, text, 0o644); err != nil {
		t.Fatal(err)
	}
	return addr
}
