//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// startWithBobQueued starts a real Postfix whose relay defers everything
// and the daemon with oneHoldLimit and the Postfix's queue commands, and
// sends one message from bob, which stays queued; it returns the queue
// (bob's queue ID alone).
func startWithBobQueued(t *testing.T) (*mtatest.Postfix, string, *testDaemon, []string) {
	t.Helper()
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
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
	return pf, cfgPath, td, all
}

// TestIntegrationForgedQueueIDNeverReachesPostsuper: three END-OF-MESSAGE
// requests with queue_id=ALL against a hold limit, then "quarantine delete
// --key mallory", must not run "postsuper -d ALL" and delete every queued
// message. Someone else's
// message waiting in the real Postfix queue must survive, and no entry
// may carry the forged queue ID.
func TestIntegrationForgedQueueIDNeverReachesPostsuper(t *testing.T) {
	pf, cfgPath, td, all := startWithBobQueued(t)
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
	if strings.Contains(out, `"queue_id": "ALL"`) {
		t.Fatalf("forged queue ID stored:\n%s", out)
	}
	if n := strings.Count(out, `"key": "mallory"`); n != holds {
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

// TestIntegrationForgedValidQueueIDsAreNotTrusted: queue IDs in valid
// Postfix and Exim syntax, forged by a client over a hold limit at
// END-OF-MESSAGE, are never acted on. Bob's real queue ID sent twice
// from two instances is stored on one entry at most (two entries never
// share a queue ID); 3F2A1B4C5D, 4Yq3sT0m8Jz1234 and 1qX5Yz-000123-AB
// name nothing. Before "quarantine delete --key mallory" runs postsuper
// -d, the real Postfix's queue listing (postqueue -j) must confirm each
// queue ID with mallory's envelope on hold: none is, so each delete is
// refused and logged, quarantine list shows the entries "unverified",
// and bob's queued message survives; show and thaw are refused the same
// way, and delete --force forgets the records without touching Postfix.
func TestIntegrationForgedValidQueueIDsAreNotTrusted(t *testing.T) {
	pf, cfgPath, td, all := startWithBobQueued(t)
	bob := all[0]
	// The first request of the hour is admitted; every later one is held.
	forgedEndOfMessageAs(t, td.policyAddr, "mallory", "4F2A1B4C5D6", "warmup")
	holds := 0
	for i, qid := range []string{bob, bob, "3F2A1B4C5D", "3F2A1B4C5D", "4Yq3sT0m8Jz1234", "1qX5Yz-000123-AB"} {
		if strings.HasPrefix(forgedEndOfMessageAs(t, td.policyAddr, "mallory", qid, fmt.Sprintf("forged.%d", i)), "action=HOLD") {
			holds++
		}
	}
	if holds != 6 {
		t.Fatalf("%d of 6 forged requests held", holds)
	}
	out, _ := cli(t, "--config", cfgPath, "quarantine", "list", "--key", "mallory", "--json")
	if n := strings.Count(out, `"key": "mallory"`); n != holds {
		t.Fatalf("%d entries for %d HOLDs:\n%s", n, holds, out)
	}
	for _, qid := range []string{bob, "3F2A1B4C5D"} {
		if n := strings.Count(out, fmt.Sprintf(`"queue_id": %q`, qid)); n > 1 {
			t.Errorf("%d entries share queue ID %s:\n%s", n, qid, out)
		}
	}

	var bobEntry string
	var entries []struct {
		ID      string
		QueueID string `json:"queue_id"`
	}
	json.Unmarshal([]byte(out), &entries)
	for _, e := range entries {
		if e.QueueID == bob {
			bobEntry = e.ID
		}
	}
	if bobEntry != "" {
		if out, _ := cli(t, "--config", cfgPath, "quarantine", "show", bobEntry); strings.Contains(out, "hello") ||
			!strings.Contains(out, "does not confirm the queue ID") {
			t.Errorf("quarantine show of a forged entry printed bob's message, or no refusal:\n%s", out)
		}
		if out, err := cli(t, "--config", cfgPath, "quarantine", "thaw", bobEntry); err == nil {
			t.Errorf("quarantine thaw of a forged entry succeeded:\n%s", out)
		}
	}
	out, err := cli(t, "--config", cfgPath, "quarantine", "delete", "--key", "mallory", "--yes")
	if now, _ := pf.QueueIDs(t); len(now) != 1 || now[0] != bob {
		t.Fatalf("bob's queued message %s is gone after deleting mallory's entries (queue now %v):\n%s", bob, now, out)
	}
	if err == nil || strings.Contains(out, fmt.Sprintf("%d deleted, 0 failed", holds)) {
		t.Fatalf("quarantine delete --key mallory accepted every forged queue ID: %v\n%s", err, out)
	}
	if !strings.Contains(td.logs.String(), "refusing to act on a held message") {
		t.Errorf("the refusals were not logged:\n%s", td.logs.String())
	}
	out, _ = cli(t, "--config", cfgPath, "quarantine", "list", "--key", "mallory")
	if !strings.Contains(out, "held:unverified") {
		t.Errorf("quarantine list does not flag the forged entries:\n%s", out)
	}
	out, err = cli(t, "--config", cfgPath, "quarantine", "delete", "--key", "mallory", "--yes", "--force")
	if err != nil || !strings.Contains(out, ", 0 failed") {
		t.Fatalf("delete --force: %v\n%s", err, out)
	}
	if now, _ := pf.QueueIDs(t); len(now) != 1 || now[0] != bob {
		t.Fatalf("delete --force touched Postfix's queue: %v", now)
	}
	if out, _ := cli(t, "--config", cfgPath, "quarantine", "list", "--key", "mallory"); !strings.Contains(out, "0 messages") {
		t.Fatalf("after delete --force:\n%s", out)
	}
}
