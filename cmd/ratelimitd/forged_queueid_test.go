package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// forgedEndOfMessage sends one END-OF-MESSAGE policy request with the given
// queue_id, as any local user who can reach the policy port can, and
// returns the action line.
func forgedEndOfMessage(t testing.TB, addr, user, queueID string) string {
	t.Helper()
	return forgedEndOfMessageAs(t, addr, user, queueID, "forged."+queueID)
}

// forgedEndOfMessageAs is forgedEndOfMessage with the policy instance
// given (one per forging daemon instance or message).
func forgedEndOfMessageAs(t testing.TB, addr, user, queueID, instance string) string {
	t.Helper()
	return sendPolicy(t, addr, fmt.Sprintf("protocol_state=END-OF-MESSAGE\nsasl_username=%s\nsender=%s@example.org\n"+
		"recipient=victim@example.net\nrecipient_count=1\nclient_address=192.0.2.66\nqueue_id=%s\ninstance=%s\nsize=100\n",
		user, user, queueID, instance))
}

// sendPolicy sends one policy request (attrs: "name=value\n" lines after
// the request attribute) over a new connection and returns the action line.
func sendPolicy(t testing.TB, addr, attrs string) string {
	t.Helper()
	return policyAsk(t, addr, strings.TrimSuffix(attrs, "\n"))
}

// oneHoldLimit is a strict limit that holds every message of a SASL user
// after the first in an hour.
const oneHoldLimit = `
[[limit]]
name = "onehold"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "hold"
`

// postfixHoldCommands is the quarantine release, delete, show and queue
// list commands for mail held in the test Postfix pf.
func postfixHoldCommands(pf *mtatest.Postfix) string {
	return fmt.Sprintf(`release_command = ["postsuper", "-c", %[1]q, "-H", "{queue_id}"]
delete_command = ["postsuper", "-c", %[1]q, "-d", "{queue_id}"]
show_command = ["postcat", "-c", %[1]q, "-q", "{queue_id}"]
queue_list_command = ["postqueue", "-c", %[1]q, "-j"]
`, pf.ConfigDir())
}

// fakeHeldQueue writes, in dir, a postqueue -j listing of held messages
// from sender to rcpts with the given queue IDs, arrived now, and returns
// the queue_list_command line that prints it: the stand-in queue that
// confirms the queue IDs of tests whose other queue commands are
// stand-ins too.
func fakeHeldQueue(t testing.TB, dir, sender string, rcpts []string, qids ...string) string {
	t.Helper()
	type rcpt struct {
		Address string `json:"address"`
	}
	var b strings.Builder
	for _, qid := range qids {
		m := map[string]any{"queue_name": "hold", "queue_id": qid, "arrival_time": time.Now().Unix(), "sender": sender,
			"recipients": []rcpt{}}
		for _, r := range rcpts {
			m["recipients"] = append(m["recipients"].([]rcpt), rcpt{r})
		}
		line, _ := json.Marshal(m)
		b.Write(line)
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "postqueue-j.json")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("queue_list_command = [\"cat\", %q]\n", path)
}
