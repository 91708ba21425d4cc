package mtatest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// OneHoldLimit is a ratelimitd [[limit]] table, strict, that holds every
// message of a SASL user after the first in an hour.
const OneHoldLimit = `
[[limit]]
name = "onehold"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "hold"
`

// HoldCommands is the [quarantine] release, delete, show and queue list
// commands (TOML lines) for mail held in this instance.
func (p *Postfix) HoldCommands() string {
	return fmt.Sprintf(`release_command = ["postsuper", "-c", %[1]q, "-H", "{queue_id}"]
delete_command = ["postsuper", "-c", %[1]q, "-d", "{queue_id}"]
show_command = ["postcat", "-c", %[1]q, "-q", "{queue_id}"]
queue_list_command = ["postqueue", "-c", %[1]q, "-j"]
`, p.confDir)
}

// FakeHeldQueue writes, in dir, a "postqueue -j" listing of held messages
// from sender to rcpts with the given queue IDs, arrived now, and returns
// the [quarantine] queue_list_command line (TOML) that prints it: a
// stand-in queue that confirms those queue IDs, no Postfix needed.
func FakeHeldQueue(t testing.TB, dir, sender string, rcpts []string, qids ...string) string {
	t.Helper()
	var b []byte
	for _, qid := range qids {
		e := QueueEntry{QueueName: "hold", QueueID: qid, ArrivalTime: time.Now().Unix(), Sender: sender, Recipients: []queueRcpt{}}
		for _, r := range rcpts {
			e.Recipients = append(e.Recipients, queueRcpt{r})
		}
		line, _ := json.Marshal(e)
		b = append(append(b, line...), '\n')
	}
	path := filepath.Join(dir, "postqueue-j.json")
	must(t, os.WriteFile(path, b, 0o644))
	return fmt.Sprintf("queue_list_command = [\"cat\", %q]\n", path)
}

// Newsletter is part n of SASL user's newsletter from user@example.org,
// sent from 192.0.2.7 to rcpt@example.net (subject "newsletter part 0n").
func Newsletter(user string, n int) Mail {
	return Mail{
		Login: user, ClientAddr: "192.0.2.7",
		From: user + "@example.org", To: []string{"rcpt@example.net"},
		Data: BuildMessage(user+"@example.org", "rcpt@example.net", fmt.Sprintf("newsletter part %02d", n),
			fmt.Sprintf("Dear reader,\nthis is part %d of the newsletter.\n", n)),
	}
}
