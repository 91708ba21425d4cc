package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// forgedEndOfMessage sends one END-OF-MESSAGE policy request with the given
// queue_id, as any local user who can reach the policy port can, and
// returns the action line.
func forgedEndOfMessage(t testing.TB, addr, user, queueID string) string {
	t.Helper()
	return sendPolicy(t, addr, fmt.Sprintf("protocol_state=END-OF-MESSAGE\nsasl_username=%s\nsender=%s@example.org\n"+
		"recipient=victim@example.net\nrecipient_count=1\nclient_address=192.0.2.66\nqueue_id=%s\ninstance=forged.%s\nsize=100\n",
		user, user, queueID, queueID))
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

// postfixHoldCommands is the quarantine release, delete and show commands
// for mail held in the test Postfix pf.
func postfixHoldCommands(pf *mtatest.Postfix) string {
	return fmt.Sprintf(`release_command = ["postsuper", "-c", %[1]q, "-H", "{queue_id}"]
delete_command = ["postsuper", "-c", %[1]q, "-d", "{queue_id}"]
show_command = ["postcat", "-c", %[1]q, "-q", "{queue_id}"]
`, pf.ConfigDir())
}

// TestIntegrationForgedQueueIDNeverReachesPostsuper: three END-OF-MESSAGE
// requests with queue_id=ALL against a hold limit, then "quarantine delete
// --key mallory", must not run "postsuper -d ALL" and delete every queued
// message. Someone else's
// message waiting in the real Postfix queue must survive, and no entry
// may carry the forged queue ID.
func TestIntegrationForgedQueueIDNeverReachesPostsuper(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	// The sink defers everything: bob's message stays in Postfix's queue.
	sink.SetReply(mtatest.StageRcpt, &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"})
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr()})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "\n[quarantine]\n"+postfixHoldCommands(pf)+oneHoldLimit)
	td := startTestDaemon(t, cfgPath)

	if err := sendAs(t, pf, "bob", 1); err != nil {
		t.Fatal(err)
	}
	all, _ := pf.WaitQueue(t, 30*time.Second, func(all, _ []string) bool { return len(all) == 1 })
	if len(all) != 1 {
		t.Fatalf("queue %v, want bob's message", all)
	}
	holds := 0
	for range 3 {
		if strings.HasPrefix(forgedEndOfMessage(t, td.policyAddr, "mallory", "ALL"), "action=HOLD") {
			holds++
		}
	}
	if holds == 0 {
		t.Fatal("the hold limit never answered HOLD")
	}
	out, _ := cli(t, "--config", cfgPath, "quarantine", "list", "--key", "mallory", "--json")
	if strings.Contains(out, `"queue_id":"ALL"`) {
		t.Fatalf("forged queue ID stored:\n%s", out)
	}
	if n := strings.Count(out, `"key":"mallory"`); n != holds {
		t.Fatalf("%d entries for %d HOLDs:\n%s", n, holds, out)
	}
	out, err := cli(t, "--config", cfgPath, "quarantine", "delete", "--key", "mallory", "--yes")
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d deleted, 0 failed", holds)) {
		t.Fatalf("quarantine delete --key mallory: %v\n%s", err, out)
	}
	if now, _ := pf.QueueIDs(t); len(now) != 1 || now[0] != all[0] {
		t.Fatalf("bob's queued message %v is gone after deleting mallory's entries (queue now %v)", all, now)
	}
	if !strings.Contains(td.logs.String(), "queue ID") {
		t.Fatalf("the forged queue ID was not logged:\n%s", td.logs.String())
	}
}
