//go:build integration

package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// startWithBobQueued starts a real Postfix whose relay defers everything
// and the daemon with mtatest.OneHoldLimit and the Postfix's queue
// commands, and sends one message from bob, which stays queued; it
// returns the queue (bob's queue ID alone).
func startWithBobQueued(t *testing.T) (*mtatest.Postfix, *testDaemon, []string) {
	t.Helper()
	sink := mtatest.StartSink(t)
	sink.SetReply(mtatest.StageRcpt, &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "try later"})
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr()})
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), "\n[quarantine]\n"+pf.HoldCommands()+mtatest.OneHoldLimit))
	if err := sendAs(t, pf, "bob", 1); err != nil {
		t.Fatal(err)
	}
	all, _ := pf.WaitQueue(t, 30*time.Second, func(all, _ []string) bool { return len(all) == 1 })
	if len(all) != 1 {
		t.Fatalf("queue %v, want bob's message", all)
	}
	return pf, td, all
}

// TestIntegrationForgedQueueIDNeverReachesPostsuper: three END-OF-MESSAGE
// requests with queue_id=ALL against a hold limit, then "quarantine delete
// --key mallory", must not run "postsuper -d ALL" and delete every queued
// message. Someone else's
// message waiting in the real Postfix queue must survive, and no entry
// may carry the forged queue ID.
func TestIntegrationForgedQueueIDNeverReachesPostsuper(t *testing.T) {
	pf, td, all := startWithBobQueued(t)
	holds := 0
	for range 3 {
		if strings.HasPrefix(td.forgedEndOfMessage("mallory", "ALL"), "action=HOLD") {
			holds++
		}
	}
	if holds == 0 {
		t.Fatal("the hold limit never answered HOLD")
	}
	es := td.listed("mallory")
	for _, e := range es {
		if e.QueueID == "ALL" {
			t.Fatalf("forged queue ID stored:\n%s", entriesText(es))
		}
	}
	if len(es) != holds {
		t.Fatalf("%d entries for %d HOLDs:\n%s", len(es), holds, entriesText(es))
	}
	if out, err := td.deleteEntries(lifecycle.Selection{Key: "mallory"}); err != nil || !strings.Contains(out, fmt.Sprintf("%d deleted, 0 failed", holds)) {
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
// refused and logged, quarantine list shows the entries unverified,
// and bob's queued message survives; show and thaw are refused the same
// way, and delete --force forgets the records without touching Postfix.
func TestIntegrationForgedValidQueueIDsAreNotTrusted(t *testing.T) {
	pf, td, all := startWithBobQueued(t)
	bob := all[0]
	// The first request of the hour is admitted; every later one is held.
	td.forgedEndOfMessageAs("mallory", "4F2A1B4C5D6", "warmup")
	holds := 0
	for i, qid := range []string{bob, bob, "3F2A1B4C5D", "3F2A1B4C5D", "4Yq3sT0m8Jz1234", "1qX5Yz-000123-AB"} {
		if strings.HasPrefix(td.forgedEndOfMessageAs("mallory", qid, fmt.Sprintf("forged.%d", i)), "action=HOLD") {
			holds++
		}
	}
	if holds != 6 {
		t.Fatalf("%d of 6 forged requests held", holds)
	}
	es := td.listed("mallory")
	if len(es) != holds {
		t.Fatalf("%d entries for %d HOLDs:\n%s", len(es), holds, entriesText(es))
	}
	var bobEntry string
	shared := map[string]int{}
	for _, e := range es {
		if shared[e.QueueID]++; e.QueueID == bob {
			bobEntry = e.ID
		}
	}
	for _, qid := range []string{bob, "3F2A1B4C5D"} {
		if shared[qid] > 1 {
			t.Errorf("%d entries share queue ID %s:\n%s", shared[qid], qid, entriesText(es))
		}
	}
	if bobEntry != "" {
		if res, err := td.admin().Show(t.Context(), bobEntry, false); err != nil || strings.Contains(res.Body, "hello") ||
			!strings.Contains(res.Error, "does not confirm the queue ID") {
			t.Errorf("quarantine show of a forged entry gave bob's message, or no refusal: %+v %v", res, err)
		}
		if out, err := td.thaw(lifecycle.Selection{IDs: []string{bobEntry}}); err == nil {
			t.Errorf("quarantine thaw of a forged entry succeeded:\n%s", out)
		}
	}
	out, err := td.deleteEntries(lifecycle.Selection{Key: "mallory"})
	if now, _ := pf.QueueIDs(t); len(now) != 1 || now[0] != bob {
		t.Fatalf("bob's queued message %s is gone after deleting mallory's entries (queue now %v):\n%s", bob, now, out)
	}
	if err == nil || strings.Contains(out, fmt.Sprintf("%d deleted, 0 failed", holds)) {
		t.Fatalf("quarantine delete --key mallory accepted every forged queue ID: %v\n%s", err, out)
	}
	if !strings.Contains(td.logs.String(), "refusing to act on a held message") {
		t.Errorf("the refusals were not logged:\n%s", td.logs.String())
	}
	if out := td.quarantineList(admin.ListQuery{Key: "mallory"}); !strings.Contains(out, "held:unverified") {
		t.Errorf("quarantine list does not flag the forged entries:\n%s", out)
	}
	if out, err := td.deleteEntries(lifecycle.Selection{Key: "mallory", Force: true}); err != nil || !strings.Contains(out, ", 0 failed") {
		t.Fatalf("delete --force: %v\n%s", err, out)
	}
	if now, _ := pf.QueueIDs(t); len(now) != 1 || now[0] != bob {
		t.Fatalf("delete --force touched Postfix's queue: %v", now)
	}
	if es := td.listed("mallory"); len(es) != 0 {
		t.Fatalf("after delete --force:\n%s", entriesText(es))
	}
}
