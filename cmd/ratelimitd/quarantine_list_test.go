package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestListShowsFailedThaw: a thaw whose release command fails leaves the
// message held, and quarantine list shows why in its LAST_THAW column.
func TestListShowsFailedThaw(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), `
[quarantine]
release_command = [["sh", "-c", "echo 'postsuper: fatal: queue file not found' >&2; exit 1", "sh", "{queue_id}"]]
`+mtatest.FakeHeldQueue(t, dir, "holly@example.org", []string{"r@example.net"}, "3F2A1B4C5C")+`

[[limit]]
name = "hourly"
key = "sasl_username"
limit = 1
period = "1h"
action = "hold"
via = ["policy"]
`)
	td := startTestDaemon(t, cfg)
	policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sasl_username=holly@example.org",
		"sender=holly@example.org", "recipient=r@example.net", "queue_id=3F2A1B4C5B", "instance=i0")
	ans := policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sasl_username=holly@example.org",
		"sender=holly@example.org", "recipient=r@example.net", "queue_id=3F2A1B4C5C", "instance=i1")
	if !strings.HasPrefix(ans, "action=HOLD") {
		t.Fatalf("policy answered %s", ans)
	}
	cli := func(args ...string) (int, string, string) {
		return runCLI(t, "", append([]string{"--config", cfg}, args...)...)
	}
	if status, out, stderr := cli("quarantine", "thaw", "--key", "holly@example.org"); status != 1 || !strings.Contains(out, "FAILED") {
		t.Fatalf("thaw: exit %d:\n%s%s", status, out, stderr)
	}
	status, out, stderr := cli("quarantine", "list")
	if status != 0 || !strings.Contains(out, "LAST_THAW") || !strings.Contains(out, "failed: ") || !strings.Contains(out, "queue file not found") {
		t.Fatalf("list: exit %d:\n%s%s", status, out, stderr)
	}
}
