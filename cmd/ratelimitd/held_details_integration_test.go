//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestIntegrationHeldEntryHasRecipientsSizeSubject: a message to three
// recipients held through policy delegation on a real Postfix is listed,
// once Postfix has queued it, with its queue ID, all three recipients, its
// size and its subject (from postqueue -j and postcat), like frozen mail;
// the hold is an event.
func TestIntegrationHeldEntryHasRecipientsSizeSubject(t *testing.T) {
	dir := t.TempDir()
	cfgPath, pf, _ := postfixOneHold(t, dir, "")
	startTestDaemon(t, cfgPath)
	rcpts := []string{"rcpt@example.net", "second@example.net", "third@example.net"}
	for i, to := range [][]string{rcpts[:1], rcpts} {
		subject := fmt.Sprintf("quarterly report %d", i+1)
		if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7", From: "alice@example.org", To: to,
			Data: mtatest.BuildMessage("alice@example.org", strings.Join(to, ", "), subject, "Figures attached.\n")}); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 1 })
	if len(held) != 1 {
		t.Fatalf("%d held, want 1", len(held))
	}
	var e quarantine.Entry
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := cli(t, "--config", cfgPath, "quarantine", "list", "--json")
		if err != nil {
			t.Fatal(err)
		}
		e = quarantine.Entry{}
		var es []quarantine.Entry
		if json.Unmarshal([]byte(out), &es); len(es) > 0 {
			e = es[0]
		}
		if len(e.Recipients) == 3 && e.Size > 0 && e.Subject != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("held entry not completed after 30 s: %+v", e)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if e.QueueID != held[0] || e.Subject != "quarterly report 2" || e.Size < 100 {
		t.Errorf("held entry: %+v (queue %s)", e, held[0])
	}
	out, _ := cli(t, "--config", cfgPath, "quarantine", "list")
	row := strings.Fields(strings.Split(out, "\n")[1])
	if len(row) < 9 || row[1] != "held" || row[2] != held[0] || row[5] != "3" || row[6] != fmt.Sprint(e.Size) ||
		!strings.HasSuffix(strings.Split(out, "\n")[1], "quarterly report 2  -") {
		t.Errorf("quarantine list:\n%s", out)
	}
	out, _ = cli(t, "--config", cfgPath, "events", "--action", "hold")
	if !strings.Contains(out, "alice") || !strings.Contains(out, "onehold") || !strings.Contains(out, "2/1") {
		t.Errorf("events --action hold:\n%s", out)
	}
}

// TestIntegrationHeldEntryCompleteAtOnce: with check_policy_service at RCPT
// only (no queue ID, no size when Postfix asks), a held message is listed
// right after Postfix accepted it with its queue ID, the size postqueue
// reports and its subject, not only after the periodic completion or a
// quarantine show; three times over.
func TestIntegrationHeldEntryCompleteAtOnce(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port),
		ExtraMainCF: map[string]string{"smtpd_end_of_data_restrictions": ""}})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), "\n[quarantine]\n"+pf.HoldCommands()+mtatest.OneHoldLimit)
	startTestDaemon(t, cfgPath)
	for _, user := range []string{"alice", "bob", "carol"} {
		var subject string
		for i := range 2 {
			subject = fmt.Sprintf("report %d from %s", i+1, user)
			if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: user, ClientAddr: "192.0.2.7", From: user + "@example.org",
				To: []string{"r@example.net"}, Data: mtatest.BuildMessage(user+"@example.org", "r@example.net", subject, "Figures attached.\n")}); err != nil {
				t.Fatalf("%s message %d: %v", user, i+1, err)
			}
		}
		out, err := cli(t, "--config", cfgPath, "quarantine", "list", "--key", user, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var es []quarantine.Entry
		if err := json.Unmarshal([]byte(out), &es); err != nil || len(es) != 1 {
			t.Fatalf("%s: quarantine list --json: %v\n%s", user, err, out)
		}
		e := es[0]
		var size int64
		for _, q := range pf.Queue(t) {
			if q.QueueID == e.QueueID {
				size = q.MessageSize
			}
		}
		if e.QueueID == "" || e.Subject != subject || size == 0 || e.Size != size {
			t.Fatalf("%s: held entry listed at once: queue ID %q, subject %q, size %d (postqueue: %d); want the queue's", user, e.QueueID, e.Subject, e.Size, size)
		}
	}
}
