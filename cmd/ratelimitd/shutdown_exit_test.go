package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestExitSoonAfterStopped runs the real binary, sends it SIGTERM and
// times the log line "ratelimitd stopped" against the process's exit: at
// most 0.5 s apart (before: 1.7 to 2.0 s).
func TestExitSoonAfterStopped(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cfgPath := writeConfig(t, dir, addr, "")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Under the race detector a process sleeps a second at exit
	// (GORACE atexit_sleep_ms, default 1000): not the daemon's time.
	cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfgPath, "GORACE=atexit_sleep_ms=0")
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	started, stopped := make(chan struct{}), make(chan time.Time, 1)
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			l := sc.Text()
			logs.WriteString(l + "\n")
			switch {
			case strings.Contains(l, "ratelimitd started"):
				close(started)
			case strings.Contains(l, "ratelimitd stopped"):
				stopped <- time.Now()
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not start")
	}
	policyQuery(t, addr, "ursula", "END-OF-MESSAGE")
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	exited := time.Now()
	pw.Close()
	if err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	var at time.Time
	select {
	case at = <-stopped:
	case <-time.After(time.Second):
		t.Fatalf("no 'ratelimitd stopped' line:\n%s", logs.String())
	}
	gap := exited.Sub(at)
	t.Logf("exited %v after logging 'ratelimitd stopped'", gap.Round(time.Millisecond))
	if gap > 500*time.Millisecond {
		t.Fatalf("exited %v after 'ratelimitd stopped', want at most 0.5 s", gap)
	}
}

// TestSIGTERMRightAfterStartShutsDownCleanly: a SIGTERM sent the moment
// "ratelimitd started" is logged (systemd stopping a unit it just
// started) killed the process by the default action before its handler
// was installed, without a shutdown; it now exits 0 with "ratelimitd
// stopped".
func TestSIGTERMRightAfterStartShutsDownCleanly(t *testing.T) {
	for i := range 5 {
		dir := t.TempDir()
		cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfgPath)
		pr, pw := io.Pipe()
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var logs strings.Builder
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(pr)
			for sc.Scan() {
				logs.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "ratelimitd started") {
					cmd.Process.Signal(syscall.SIGTERM)
				}
			}
		}()
		err := cmd.Wait()
		pw.Close()
		<-done
		if err != nil || !strings.Contains(logs.String(), "ratelimitd stopped") {
			t.Fatalf("run %d: SIGTERM at start: %v\n%s", i, err, logs.String())
		}
	}
}
