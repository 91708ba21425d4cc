//go:build integration

package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// With the state directory's file system full, failed flushes must be
// loud: a log line, a metric and status. The test mounts a 1 MiB tmpfs as
// the state directory (it needs root), fills it while the daemon counts,
// checks the log, metric and status, frees space, checks the recovery,
// then kills the daemon with SIGKILL and checks that the restart forgives
// nobody counted while the disk was full.
func TestDiskFullIsLoud(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	mtatest.MountTmpfs(t, stateDir)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	mport := freePort(t)
	cfg := writeConfig(t, dir, addr, "")
	text, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, []byte(strings.Replace(string(text), `metrics_listen = ""`, fmt.Sprintf(`metrics_listen = "127.0.0.1:%d"`, mport), 1)), 0o644)
	metrics := func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", mport))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	run := func() (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfg)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitFor("the daemon to start", func() bool { return strings.Contains(out.String(), "ratelimitd started") })
		return cmd, out
	}
	cmd, logs := run()
	refuse(t, addr, "mallory", 200)
	waitFor("a flush", func() bool { return metricValue(metrics(), "ratelimitd_state_flushes_total") > 0 })

	filler := mtatest.FillFileSystem(t, stateDir)
	// Counting goes on with the disk full: rex is refused, and new keys
	// make the file grow, which fails.
	refuse(t, addr, "rex", 200)
	for i := range 600 {
		policyQuery(t, addr, fmt.Sprintf("newcomer-with-a-long-name-%04d", i), "END-OF-MESSAGE")
	}
	waitFor("a failed flush counted", func() bool { return metricValue(metrics(), "ratelimitd_state_flush_failures_total") > 0 })
	if m := metrics(); metricValue(m, "ratelimitd_state_pending_changes") <= 0 || metricValue(m, "ratelimitd_state_last_error_timestamp_seconds") <= 0 {
		t.Errorf("metrics during the failure:\n%s", m)
	}
	if l := logs.String(); !strings.Contains(l, "rate state flush failed") || !strings.Contains(l, "no space left on device") {
		t.Fatalf("the failed flush is not logged with its cause:\n%s", l)
	}
	out, err := cli(t, "--config", cfg, "status")
	if err != nil || !strings.Contains(out, "no space left on device") || !strings.Contains(out, "rate state: last flush") {
		t.Fatalf("status during the failure: %v\n%s", err, out)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor("the recovery", func() bool {
		m := metrics()
		return metricValue(m, "ratelimitd_state_pending_changes") == 0 &&
			metricValue(m, "ratelimitd_state_last_flush_timestamp_seconds") > metricValue(m, "ratelimitd_state_last_error_timestamp_seconds")
	})
	out, _ = cli(t, "--config", cfg, "status")
	if !strings.Contains(out, "0 changes pending") {
		t.Errorf("status after the recovery:\n%s", out)
	}
	cmd.Process.Kill() // SIGKILL: no final flush
	cmd.Wait()
	run()
	mustDefer(t, addr, "mallory")
	mustDefer(t, addr, "rex")
	if got := policyQuery(t, addr, "newcomer-with-a-long-name-0599", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Errorf("a newcomer's second message: %s", got)
	}
}
