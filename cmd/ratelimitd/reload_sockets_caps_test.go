package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
)

// config check refuses a file without limits, naming limits = "none",
// and accepts limits = "none" said explicitly, loudly.
func TestConfigCheckLimitlessFile(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "ratelimitd.toml")
	os.WriteFile(cfgPath, []byte("[server]\nstate_dir = \""+filepath.Join(dir, "state")+"\"\n"), 0o644)
	out, err := cli(t, "config", "check", cfgPath)
	if err == nil || !strings.Contains(out, `limits = "none"`) {
		t.Fatalf("config check of a limit-less file: %v\n%s", err, out)
	}
	os.WriteFile(cfgPath, []byte("[policy]\nlimits = \"none\"\n[server]\nstate_dir = \""+filepath.Join(dir, "state")+"\"\n"), 0o644)
	if out, err := cli(t, "config", "check", cfgPath); err != nil || !strings.Contains(out, "every sender is unlimited") {
		t.Fatalf("config check with limits = \"none\": %v\n%s", err, out)
	}
}

// startSubprocessDaemon runs the real ratelimitd serve in a re-executed test
// binary with the environment env added, and waits for it to start.
func startSubprocessDaemon(t *testing.T, cfgPath string, env ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfgPath), env...)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; !strings.Contains(out.String(), "ratelimitd started"); i++ {
		if i == 1500 {
			t.Fatalf("daemon did not start:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, out
}

// statusWithin asks the daemon's admin socket for its status, failing
// after limit instead of the CLI's 30 s.
func statusWithin(sock string, limit time.Duration) (admin.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return admin.NewClient(sock).Status(ctx)
}

// At a low file-descriptor limit, a flood of policy and milter connections
// is capped per front end (max_connections defaults to RLIMIT_NOFILE/2,
// the milter's to RLIMIT_NOFILE/4): the silent connections over the cap
// close the oldest idle ones, counted, and the admin socket, /metrics and
// the newest connections keep answering.
func TestConnectionCapKeepsAdminAlive(t *testing.T) {
	dir := t.TempDir()
	port, mport, milterPort := freePort(t), freePort(t), freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The silent connections are kept for as long as the test runs.
	cfgPath := writeConfig(t, dir, addr, fmt.Sprintf("\n[milter]\nlisten = \"127.0.0.1:%d\"\nfirst_request_timeout = \"300s\"\n", milterPort))
	text, _ := os.ReadFile(cfgPath)
	text = []byte(strings.Replace(string(text), `metrics_listen = ""`, fmt.Sprintf(`metrics_listen = "127.0.0.1:%d"`, mport), 1))
	text = []byte(strings.Replace(string(text), "[server]\n", "[server]\nfirst_request_timeout = \"300s\"\n", 1))
	if v := os.Getenv("RATELIMITD_TEST_MAX_CONNECTIONS"); v != "" { // to see the test fail without a cap
		text = []byte(strings.Replace(string(text), "[server]\n", "[server]\nmax_connections = "+v+"\n", 1))
	}
	os.WriteFile(cfgPath, text, 0o644)
	const nofile, policyConns, milterConns = 64, 60, 8
	const want, wantMilter = nofile / 2, nofile / 4 // the default caps
	startSubprocessDaemon(t, cfgPath, fmt.Sprintf("RATELIMITD_TEST_NOFILE=%d", nofile))
	f, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for i := range policyConns + milterConns {
		a := addr
		if i >= policyConns {
			a = fmt.Sprintf("127.0.0.1:%d", milterPort)
		}
		c, err := net.DialTimeout("tcp", a, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	var st admin.Status
	for i := 0; ; i++ {
		st, err = statusWithin(f.Server.AdminSocket, 5*time.Second)
		if err != nil {
			t.Fatalf("admin status with %d connections open: %v", len(conns), err)
		}
		if len(st.Connections) == 2 && st.Connections[0].Open+int(st.Connections[0].Closed["evicted"]) == policyConns &&
			st.Connections[1].Open == milterConns {
			break
		}
		if i == 1000 {
			t.Fatalf("connections not all accepted or evicted: %+v", st.Connections)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if p, m := st.Connections[0], st.Connections[1]; p.FrontEnd != "policy" || p.Max != want || p.Open != want ||
		p.Closed["evicted"] != int64(policyConns-want) || m.FrontEnd != "milter" || m.Max != wantMilter {
		t.Fatalf("connections %+v; want policy %d open of max %d, %d evicted; milter max %d", st.Connections, want, want, policyConns-want, wantMilter)
	}
	hc := &http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", mport))
	if err != nil {
		t.Fatalf("metrics with the cap reached: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	evicted := 0
	for _, line := range strings.Split(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, `ratelimitd_connections_refused_total{listener="policy",reason="evicted"} `); ok {
			evicted, _ = strconv.Atoi(rest)
		}
	}
	if evicted != policyConns-want || !strings.Contains(string(body), fmt.Sprintf(`ratelimitd_connections_open{listener="policy"} %d`, want)) {
		t.Errorf("metrics: %d evicted (want %d) or open gauge not %d:\n%s", evicted, policyConns-want, want, body)
	}
	// The newest connection, under the cap, is still served.
	c := conns[policyConns-1]
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=RCPT\nsasl_username=cap\nclient_address=192.0.2.9\n\n")
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(line, "action=DUNNO") {
		t.Fatalf("policy request on an accepted connection: %q %v", line, err)
	}
}

// procStatus returns a "kB" field of /proc/PID/status (VmRSS, VmHWM) in
// bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// The milter keeps a message only when a freeze limit could apply, and
// then spools it to the state directory: concurrent large messages do not
// grow the daemon's memory by their size (before the spool, 8 concurrent
// 50 MB messages took 411 MB RSS). RATELIMITD_TEST_MILTER_N and
// RATELIMITD_TEST_MILTER_MB scale it up for a measurement.
func TestMilterMemoryBounded(t *testing.T) {
	n, mb := 4, 16
	if v, err := strconv.Atoi(os.Getenv("RATELIMITD_TEST_MILTER_N")); err == nil {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("RATELIMITD_TEST_MILTER_MB")); err == nil {
		mb = v
	}
	line := []byte(strings.Repeat("0123456789abcdef", 4) + "\r\n")
	body := bytes.Repeat(line, mb<<20/len(line))
	for _, tc := range []struct{ name, limits string }{
		{"no freeze limit", ""},
		{"freeze limit, spooled", `
[[limit]]
name = "mua"
key = ["sasl_username"]
limit = 1000
period = "1h"
mode = "strict"
action = "freeze"
via = ["milter"]
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			milterAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf("\n[milter]\nlisten = %q\n", milterAddr))
			text, _ := os.ReadFile(cfgPath)
			os.WriteFile(cfgPath, append(text, tc.limits...), 0o644)
			cmd, out := startSubprocessDaemon(t, cfgPath)
			base := procStatus(t, cmd.Process.Pid, "VmRSS")
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					discarded, err := deliverOne(milterAddr, i, body)
					if err == nil && discarded {
						err = errors.New("message discarded")
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("delivery: %v\n%s", err, out.String())
				}
			}
			peak := procStatus(t, cmd.Process.Pid, "VmHWM")
			t.Logf("%d concurrent %d MB messages: RSS %d MB at start, peak %d MB", n, mb, base>>20, peak>>20)
			if grown, bound := peak-base, int64(n*mb)<<20/2; grown > bound {
				t.Fatalf("peak RSS grew by %d MB for %d concurrent %d MB messages (bound %d MB)", grown>>20, n, mb, bound>>20)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "state")); slices.ContainsFunc(ents, func(e os.DirEntry) bool { return strings.HasSuffix(e.Name(), ".spool") }) {
				t.Fatalf("spool files left in the state directory: %v", ents)
			}
		})
	}
}

// TestMetricsScrapersCannotSilencePolicy: at 64 file descriptors, 120
// keep-alive connections to /metrics made accept fail with "too many open
// files" on every listener, so policy requests and `status` went
// unanswered. The HTTP listeners are capped now: the policy service and
// the admin socket keep answering while the scrapers hold on.
func TestMetricsScrapersCannotSilencePolicy(t *testing.T) {
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfgPath := writeConfig(t, dir, addr, "")
	text, _ := os.ReadFile(cfgPath)
	text = []byte(strings.Replace(string(text), `metrics_listen = ""`, fmt.Sprintf(`metrics_listen = "127.0.0.1:%d"`, mport), 1))
	os.WriteFile(cfgPath, text, 0o644)
	startSubprocessDaemon(t, cfgPath, "RATELIMITD_TEST_NOFILE=64")
	f, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	// 120 scrapers, each holding its keep-alive connection open.
	var scrapers []net.Conn
	defer func() {
		for _, c := range scrapers {
			c.Close()
		}
	}()
	for range 120 {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", mport), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		scrapers = append(scrapers, c)
		fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	time.Sleep(500 * time.Millisecond) // let the daemon accept what it will
	// policyAsk fails the test after 10 s without an answer.
	if r := sendPolicy(t, addr, "protocol_state=RCPT\nsasl_username=alice\nsender=alice@example.org\nrecipient=r@example.net\nclient_address=192.0.2.7\n"); !strings.Contains(r, "action=") {
		t.Fatalf("policy reply %q with 120 /metrics connections open", r)
	}
	if _, err := statusWithin(f.Server.AdminSocket, 5*time.Second); err != nil {
		t.Fatalf("status with 120 /metrics connections open: %v", err)
	}
}
