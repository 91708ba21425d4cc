package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/daemon"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t testing.TB) int { return mtatest.FreePort(t) }

// syncBuffer collects a daemon's log lines (mtatest.SyncBuffer).
type syncBuffer = mtatest.SyncBuffer

// testDaemon is an in-process daemon on a private state directory.
type testDaemon struct {
	t          testing.TB
	d          *daemon.Daemon
	configPath string
	policyAddr string
	logs       *syncBuffer
}

// defaultTestLimits are the embedded default's limits: 200/h leaky plus
// 1000/day strict per SASL user.
const defaultTestLimits = `
[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 200
period = "1h"
mode = "leaky"
action = "defer"

[[limit]]
name = "daily"
key = ["sasl_username"]
limit = 1000
period = "24h"
mode = "strict"
action = "defer"
`

// limitTable is one [[limit]] table of the TOML lines kv.
func limitTable(kv ...string) string { return "\n[[limit]]\n" + strings.Join(kv, "\n") + "\n" }

// writeConfig writes a configuration whose [server] points into dir, with
// the embedded default limits unless extra has [[limit]] tables.
func writeConfig(t testing.TB, dir, policyAddr, extra string) string {
	t.Helper()
	text := fmt.Sprintf(`
[server]
policy_listen = [%q]
state_dir = %q
metrics_listen = ""
flush_interval = "200ms"
log_level = "debug"
%s`, policyAddr, filepath.Join(dir, "state"), extra)
	if !strings.Contains(extra, "[[limit]]") {
		text += defaultTestLimits
	}
	path := filepath.Join(dir, "ratelimitd.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func startTestDaemon(t testing.TB, configPath string) *testDaemon {
	t.Helper()
	f, err := config.Load(configPath)
	if err != nil {
		t.Fatal(err)
	}
	td := &testDaemon{t: t, configPath: configPath, policyAddr: f.Server.PolicyListen[0], logs: &syncBuffer{}}
	td.d, err = daemon.Start(f, configPath, td.logs, daemon.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { td.stop() })
	return td
}

// contextWithTimeout is a context that ends after d.
func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

func (td *testDaemon) stop() {
	if td.d == nil {
		return
	}
	ctx, cancel := contextWithTimeout(10 * time.Second)
	defer cancel()
	if err := td.d.Shutdown(ctx); err != nil {
		td.t.Errorf("shutdown: %v", err)
	}
	td.d = nil
}

// cli runs a ratelimitd subcommand in-process and returns its output.
func cli(t testing.TB, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}
