package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestOperatorOutputStripsControlCharacters: envelope
// senders, subjects, command errors and the MTA's own output (postcat for
// held mail) reach the operator's terminal; none may carry an ESC or
// another control character.
func TestOperatorOutputStripsControlCharacters(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sender := "\x1b]0;owned\x07\x1b[2Jevil\x9b6n@example.org"
	// Stand-ins for postsuper and postcat that print terminal escapes,
	// as a hostile message shown by postcat would.
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), `
[quarantine]
release_command = ["sh", "-c", "printf '\\033]0;pwned\\007release failed'; exit 1", "sh", "{queue_id}"]
delete_command = ["sh", "-c", "printf '\\033[2Jdelete failed'; exit 1", "sh", "{queue_id}"]
show_command = ["sh", "-c", "printf 'Subject: \\033[31mred\\033[0m\\r\\n\\r\\nbody of %s\\233\\n' \"$1\"", "sh", "{queue_id}"]
`+mtatest.FakeHeldQueue(t, dir, sender, []string{"r@example.net"}, "4F2A12341", "4F2A12342")+mtatest.OneHoldLimit)
	td := startTestDaemon(t, cfgPath)
	for i := range 3 { // the first is within the limit
		sendPolicy(t, td.policyAddr, fmt.Sprintf("protocol_state=END-OF-MESSAGE\nsasl_username=mallory\nsender=%s\n"+
			"recipient=r@example.net\nrecipient_count=1\nqueue_id=4F2A1234%d\ninstance=esc.%d\nsize=10\n", sender, i, i))
	}
	check := func(what, out string) {
		t.Helper()
		for _, r := range out {
			if r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r < 0xa0 {
				t.Fatalf("%s: control character %U in output:\n%q", what, r, out)
			}
		}
	}
	out, err := cli(t, "--config", cfgPath, "quarantine", "list")
	if err != nil || !strings.Contains(out, "2 messages") || !strings.Contains(out, "evil") {
		t.Fatalf("list: %v\n%s", err, out)
	}
	check("list", out)
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	out, err = cli(t, "--config", cfgPath, "quarantine", "show", id)
	if err != nil || !strings.Contains(out, "body of 4F2A1234") || !strings.Contains(out, "evil") {
		t.Fatalf("show: %v\n%s", err, out)
	}
	check("show", out)
	out, err = cli(t, "--config", cfgPath, "quarantine", "thaw", "--key", "mallory")
	if err == nil || !strings.Contains(out, "release failed") || !strings.Contains(out, "evil") {
		t.Fatalf("thaw: %v\n%s", err, out)
	}
	check("thaw", out)
	out, err = cli(t, "--config", cfgPath, "quarantine", "delete", "--key", "mallory", "--yes")
	if err == nil || !strings.Contains(out, "delete failed") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	check("delete", out)
}
