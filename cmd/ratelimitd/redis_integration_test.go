//go:build integration

package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// startServe runs `ratelimitd serve` (startSubprocessDaemon) and logs
// its output if the test fails.
func startServe(t *testing.T, cfgPath string) {
	t.Helper()
	_, out := startSubprocessDaemon(t, cfgPath)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("daemon %s log:\n%s", cfgPath, out.String())
		}
	})
}

// TestRedisTwoDaemons: two `ratelimitd serve` processes share one Redis.
// One user's 60 messages alternate between them and exactly the limit (20)
// is admitted; `rate reset` on one host lets the user through on the
// other at once; `rate show` and `status` on either report the shared
// state.
func TestRedisTwoDaemons(t *testing.T) {
	srv := redistest.Start(t)
	var cfgs, addrs []string
	for range 2 {
		dir := t.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		cfgs = append(cfgs, writeConfig(t, dir, addr, redisConfig(srv.Addr, "local")))
		addrs = append(addrs, addr)
		startServe(t, cfgs[len(cfgs)-1])
	}
	admitted := 0
	for i := range 60 {
		got := policyQuery(t, addrs[i%2], "walter", "END-OF-MESSAGE")
		switch {
		case got == "action=DUNNO":
			admitted++
		case !strings.HasPrefix(got, "action=450 4.7.1"):
			t.Fatalf("message %d: %s", i+1, got)
		}
	}
	if admitted != 20 {
		t.Fatalf("60 messages alternating between two hosts: %d admitted, want 20", admitted)
	}
	out, err := cli(t, "--config", cfgs[1], "rate", "show", "walter")
	if err != nil || !strings.Contains(out, "hourly") {
		t.Fatalf("rate show on the second host: %v\n%s", err, out)
	}
	out, err = cli(t, "--config", cfgs[1], "status")
	if err != nil || !strings.Contains(out, "store: redis, shared") {
		t.Fatalf("status on the second host: %v\n%s", err, out)
	}
	if out, err := cli(t, "--config", cfgs[0], "rate", "reset", "walter"); err != nil {
		t.Fatalf("rate reset on the first host: %v\n%s", err, out)
	}
	if got := policyQuery(t, addrs[1], "walter", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Fatalf("after a reset on the first host the second answers %s", got)
	}
	// The offline CLI (no daemon behind the config's admin socket) reads
	// Redis directly.
	off := writeConfig(t, t.TempDir(), fmt.Sprintf("127.0.0.1:%d", freePort(t)), redisConfig(srv.Addr, "local"))
	out, err = cli(t, "--config", off, "rate", "list")
	if err != nil || !strings.Contains(out, "walter") {
		t.Fatalf("offline rate list: %v\n%s", err, out)
	}
}
