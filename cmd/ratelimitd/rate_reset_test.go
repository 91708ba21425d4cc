package main

import (
	"strings"
	"testing"
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
