package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// TestMain lets tests run the real ratelimitd main in a subprocess (the
// test binary re-executed with RATELIMITD_RUN_MAIN=1).
func TestMain(m *testing.M) {
	if os.Getenv("RATELIMITD_RUN_MAIN") == "1" {
		if n, err := strconv.ParseUint(os.Getenv("RATELIMITD_TEST_NOFILE"), 10, 64); err == nil {
			// A daemon at a low file-descriptor limit (soft and hard).
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}); err != nil {
				fmt.Fprintln(os.Stderr, "setrlimit:", err)
				os.Exit(3)
			}
		}
		os.Args = append([]string{"ratelimitd"}, strings.Fields(os.Getenv("RATELIMITD_ARGS"))...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// policyQuery sends one policy request over a new connection and returns
// the action line.
func policyQuery(t testing.TB, addr, user, state string) string {
	t.Helper()
	return policyAsk(t, addr, "protocol_state="+state, "sasl_username="+user, "sender="+user+"@example.org",
		"recipient_count=1", "client_address=192.0.2.9")
}

// With the daemon running but its admin socket gone, the CLI must not hang
// on the locked BoltDB file: it fails within about a second.
func TestCLILockedDatabase(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
	startTestDaemon(t, cfgPath)
	f, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(f.Server.AdminSocket)
	start := time.Now()
	_, err = cli(t, "--config", cfgPath, "rate", "show", "alice")
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("rate show against a locked database: %v", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("CLI took %v", time.Since(start))
	}
}

// TestServeSignals runs the real binary: SIGHUP reloads, SIGTERM drains and
// flushes, and after a restart the offender is still refused.
func TestServeSignals(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfgPath := writeConfig(t, dir, addr, "")
	run := func() (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfgPath)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "ratelimitd started") {
			if time.Now().After(deadline) {
				t.Fatalf("daemon did not start:\n%s", out.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return cmd, out
	}
	cmd, out := run()
	for i := 0; i < 200; i++ {
		if got := policyQuery(t, addr, "ursula", "END-OF-MESSAGE"); got != "action=DUNNO" {
			t.Fatalf("message %d: %s", i+1, got)
		}
	}
	cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "configuration reloaded") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "configuration reloaded") {
		t.Fatalf("SIGHUP did not reload:\n%s", out.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ratelimitd stopped") {
		t.Fatalf("no clean stop:\n%s", out.String())
	}
	cmd, _ = run()
	if got := policyQuery(t, addr, "ursula", "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") {
		t.Fatalf("after restart the 201st message got %s", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
}
