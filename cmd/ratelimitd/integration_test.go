package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

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
	td.d, err = daemon.Start(f, configPath, td.logs)
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

func sendAs(t testing.TB, pf *mtatest.Postfix, user string, n int) error {
	return mtatest.Send(t, pf.Addr(), mtatest.Mail{
		Login: user, ClientAddr: "192.0.2.7",
		From: user + "@example.org", To: []string{"rcpt@example.net"},
		Data: mtatest.BuildMessage(user+"@example.org", "rcpt@example.net", fmt.Sprintf("message %d from %s", n, user), "hello\n"),
	})
}

func smtpCode(err error) (int, string) {
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return se.Code, fmt.Sprintf("%d.%d.%d", se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2])
	}
	return 0, ""
}

// TestIntegrationPostfixPolicy runs a real Postfix whose
// check_policy_service points at ratelimitd, and real SMTP sessions as SASL
// users (XCLIENT LOGIN=).
func TestIntegrationPostfixPolicy(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "")
	td := startTestDaemon(t, cfgPath)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port)})

	// alice sends 250: the hourly burst of 200 passes, then 450 4.7.1.
	accepted, deferred := 0, 0
	for i := 1; i <= 250; i++ {
		err := sendAs(t, pf, "alice", i)
		if err == nil {
			accepted++
			if deferred > 0 {
				t.Fatalf("message %d accepted after a deferral", i)
			}
			continue
		}
		code, enh := smtpCode(err)
		if code != 450 || enh != "4.7.1" {
			t.Fatalf("message %d: %v (want 450 4.7.1)", i, err)
		}
		deferred++
	}
	if accepted != 200 || deferred != 50 {
		t.Fatalf("alice: %d accepted, %d deferred; want 200 and 50\n%s", accepted, deferred, td.logs.String())
	}
	// Another user is unaffected.
	for i := 1; i <= 5; i++ {
		if err := sendAs(t, pf, "bob", i); err != nil {
			t.Fatalf("bob message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 205, 60*time.Second)

	out, err := cli(t, "--config", cfgPath, "rate", "show", "alice")
	if err != nil || !strings.Contains(out, "hourly") || !strings.Contains(out, "at limit: allowed again in") {
		t.Fatalf("rate show alice: %v\n%s", err, out)
	}
	out, err = cli(t, "--config", cfgPath, "rate", "list", "--over")
	if err != nil || !strings.Contains(out, "alice") || strings.Contains(out, "bob") {
		t.Fatalf("rate list --over: %v\n%s", err, out)
	}
	out, err = cli(t, "--config", cfgPath, "status")
	if err != nil || !strings.Contains(out, "defer") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	// The operator resets alice: she can send again at once.
	out, err = cli(t, "--config", cfgPath, "rate", "reset", "alice")
	if err != nil || !strings.Contains(out, "2 limit states removed") {
		t.Fatalf("rate reset: %v\n%s", err, out)
	}
	if !strings.Contains(td.logs.String(), "rate reset") {
		t.Fatalf("reset not logged:\n%s", td.logs.String())
	}
	if err := sendAs(t, pf, "alice", 251); err != nil {
		t.Fatalf("alice after reset: %v", err)
	}

	// carol fills her hourly burst; a restart of the daemon keeps it.
	for i := 1; i <= 200; i++ {
		if err := sendAs(t, pf, "carol", i); err != nil {
			t.Fatalf("carol message %d: %v", i, err)
		}
	}
	td.stop()
	td = startTestDaemon(t, cfgPath)
	err = sendAs(t, pf, "carol", 201)
	if code, _ := smtpCode(err); code != 450 {
		t.Fatalf("carol after daemon restart: %v (want 450: state must survive)", err)
	}
	sink.WaitCount(t, 406, 60*time.Second)
	if log := pf.Log(); strings.Contains(log, "451 4.3.5") || strings.Contains(log, "problem talking to server") {
		t.Fatalf("Postfix saw a policy protocol error:\n%s", log)
	}
	if !strings.Contains(td.logs.String()+pf.Log(), "450 4.7.1") {
		t.Fatal("no 450 4.7.1 in the logs")
	}
}
