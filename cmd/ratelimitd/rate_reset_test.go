package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestRateResetUnknownKey: resetting a key with no rate recorded exits 1
// and names the key, through the daemon and offline; a known key's reset
// exits 0 and says how many states went.
func TestRateResetUnknownKey(t *testing.T) {
	td, cli := operationsDaemon(t)
	for _, mode := range []string{"daemon", "offline"} {
		status, out, stderr := cli("", "rate", "reset", "nobody-such")
		if status != 1 || !strings.Contains(stderr, "nobody-such: no rate recorded") || strings.Contains(out, "removed") {
			t.Errorf("%s: rate reset nobody-such: exit %d\nstdout: %s\nstderr: %s", mode, status, out, stderr)
		}
		status, _, stderr = cli("", "rate", "reset", "nobody-such", "--limit", "hourly")
		if status != 1 || !strings.Contains(stderr, "nobody-such: no rate recorded under limit hourly") {
			t.Errorf("%s: rate reset nobody-such --limit hourly: exit %d\n%s", mode, status, stderr)
		}
		user := map[string]string{"daemon": "alice@example.org", "offline": "bob@example.org"}[mode]
		status, out, stderr = cli("", "rate", "reset", user)
		if status != 0 || !strings.Contains(out, "rate reset (1 limit state removed)") {
			t.Errorf("%s: rate reset %s: exit %d\nstdout: %s\nstderr: %s", mode, user, status, out, stderr)
		}
		td.stop()
	}
}

// TestRateResetOfflineNotifies: `rate reset` with no daemon running sends
// the rate_reset notification itself, by the local user, and warns of
// nothing.
func TestRateResetOfflineNotifies(t *testing.T) {
	sink := mtatest.StartSink(t)
	cfgPath := writeConfig(t, t.TempDir(), fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf(`
[notify]
events = ["rate_reset"]
[notify.mail]
relay = %q
from = "ratelimitd@mx.example.org"
to = ["postmaster@example.org"]
`, sink.Addr()))
	td := startTestDaemon(t, cfgPath)
	if ans := policyQuery(t, td.policyAddr, "rex", "END-OF-MESSAGE"); ans != "action=DUNNO" {
		t.Fatalf("rex's message: %s", ans)
	}
	td.stop()
	out, err := cli(t, "--config", cfgPath, "rate", "reset", "rex")
	if err != nil || strings.Contains(out, "warning") {
		t.Fatalf("offline reset: %v\n%s", err, out)
	}
	msgs := sink.WaitCount(t, 1, 10*time.Second)
	if len(msgs) != 1 || !strings.Contains(msgs[0].Header("Subject"), "rex") || !strings.Contains(string(msgs[0].Data), admin.LocalUser()) {
		t.Fatalf("offline reset: want one rate_reset mail by %q, got %d:\n%s", admin.LocalUser(), len(msgs), msgs)
	}
}
