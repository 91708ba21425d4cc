//go:build integration

package daemontest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// The daemon binary, built at most once per test binary into binDir.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

// TestMain makes the directory the daemon binary is built into and
// removes it at the end.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "daemontest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemonBinary builds ./cmd/ratelimitd (once; without -race, whatever
// flags the test binary has, so the daemons run at production speed) and
// returns its path.
func daemonBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		// go test puts its own GOROOT/bin first in the test's PATH.
		goBin, err := exec.LookPath("go")
		if err != nil {
			binError = fmt.Errorf("no go command to build the daemon: %w", err)
			return
		}
		binPath = filepath.Join(binDir, "ratelimitd")
		cmd := exec.Command(goBin, "build", "-o", binPath, "github.com/ratelimitd/ratelimitd/cmd/ratelimitd")
		// The environment's GOFLAGS but -race: the daemons run at
		// production speed whatever the test binary was built with.
		var flags []string
		for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
			if f != "-race" && f != "-race=true" {
				flags = append(flags, f)
			}
		}
		cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "))
		if out, err := cmd.CombinedOutput(); err != nil {
			binError = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// daemon is one running `ratelimitd serve` process.
type daemon struct {
	// PolicyAddr is its policy delegation listener (127.0.0.1:PORT).
	PolicyAddr string
	// Admin is its admin socket.
	Admin string
	cmd   *exec.Cmd
	log   string // the file its output goes to
}

// daemonStack is the stack of the tests: 20/hour strict and 100/day
// leaky per SASL user (as ratestore/redisstore/outage_test.go), both
// deferring.
const daemonStack = `
[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 20
period = "1h"
mode = "strict"
action = "defer"

[[limit]]
name = "daily"
key = ["sasl_username"]
limit = 100
period = "24h"
mode = "leaky"
action = "defer"
`

// redisStore is the [store] table of a daemon on Redis: addrs (the
// Sentinels when master is set), redis_timeout 200ms, local decisions
// while Redis fails with degraded_share = "split" over 2 hosts.
func redisStore(addrs []string, master string) string {
	q := make([]string, len(addrs))
	for i, a := range addrs {
		q[i] = fmt.Sprintf("%q", a)
	}
	s := fmt.Sprintf(`
[store]
backend = "redis"
redis_addrs = [%s]
redis_timeout = "200ms"
on_redis_error = "local"
degraded_share = "split"
redis_hosts = 2
key_prefix = "dt:"
`, strings.Join(q, ", "))
	if master != "" {
		s += fmt.Sprintf("redis_sentinel_master = %q\n", master)
	}
	return s
}

// startDaemon runs `ratelimitd serve` with store (a [store] table) and
// daemonStack, its state, admin socket and log in temporary directories,
// and waits until its admin socket answers. The daemon is stopped
// (SIGTERM, then SIGKILL after 10s) at cleanup; its log tail is printed
// if the test failed.
func startDaemon(t *testing.T, store string) *daemon {
	t.Helper()
	bin := daemonBinary(t)
	dir := t.TempDir()
	// The admin socket's path must fit a sockaddr_un (108 bytes): a
	// short directory of its own rather than under t.TempDir.
	sockDir, err := os.MkdirTemp("", "rld")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	d := &daemon{PolicyAddr: fmt.Sprintf("127.0.0.1:%d", mtatest.FreePort(t)), Admin: filepath.Join(sockDir, "admin.sock"),
		log: filepath.Join(dir, "log")}
	cfg := fmt.Sprintf(`[server]
policy_listen = [%q]
state_dir = %q
admin_socket = %q
metrics_listen = ""
log_level = "info"
%s%s`, d.PolicyAddr, filepath.Join(dir, "state"), d.Admin, store, daemonStack)
	cfgPath := filepath.Join(dir, "ratelimitd.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command(bin, "serve", "--config", cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = procAttr()
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { d.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("daemon %s did not stop within 10s of SIGTERM", d.PolicyAddr)
			d.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("daemon %s log, warnings and errors:\n%s", d.PolicyAddr, d.logLevels(40))
			t.Logf("daemon %s log (tail):\n%s", d.PolicyAddr, d.logTail(4000))
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := d.status(); err == nil {
			return d
		}
		select {
		case <-exited:
			t.Fatalf("daemon exited at start:\n%s", d.logTail(4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon's admin socket does not answer after 20s:\n%s", d.logTail(4000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// status asks the daemon's admin socket for its status (2s at most).
func (d *daemon) status() (admin.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return admin.NewClient(d.Admin).Status(ctx)
}

// logTail is the last n bytes of the daemon's output.
// logLevels returns the first n WARN and ERROR lines of d's log.
func (d *daemon) logLevels(n int) string {
	b, err := os.ReadFile(d.log)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if len(out) < n && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func (d *daemon) logTail(n int) string {
	b, err := os.ReadFile(d.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
