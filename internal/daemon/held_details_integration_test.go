//go:build integration

package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
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
	td := startTestDaemon(t, cfgPath)
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
		e = quarantine.Entry{}
		if es := td.listed(""); len(es) > 0 {
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
	if e.State != quarantine.Held || e.QueueID != held[0] || e.Subject != "quarterly report 2" || e.Size < 100 || e.Unverified != "" {
		t.Errorf("held entry: %+v (queue %s)", e, held[0])
	}
	evs := td.eventList(events.Query{Actions: []string{"hold"}})
	if len(evs) == 0 || evs[0].Key != "alice" || evs[0].Limit != "onehold" || evs[0].Rate < 1.9 || evs[0].Rate > 2 || evs[0].Max != 1 {
		t.Errorf("events --action hold: %+v", evs)
	}
}

// TestIntegrationHeldEntryCompleteAtOnce: with check_policy_service at RCPT
// only (no queue ID, no size when Postfix asks), a held message is listed
// right after Postfix accepted it with its queue ID, the size postqueue
// reports and its subject, not only after the periodic completion or a
// quarantine show; three times over.
func TestIntegrationHeldEntryCompleteAtOnce(t *testing.T) {
	addr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr,
		ExtraMainCF: map[string]string{"smtpd_end_of_data_restrictions": ""}})
	td := startTestDaemon(t, testConfig(t, t.TempDir(), addr, "\n[quarantine]\n"+pf.HoldCommands()+mtatest.OneHoldLimit))
	for _, user := range []string{"alice", "bob", "carol"} {
		var subject string
		for i := range 2 {
			subject = fmt.Sprintf("report %d from %s", i+1, user)
			if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: user, ClientAddr: "192.0.2.7", From: user + "@example.org",
				To: []string{"r@example.net"}, Data: mtatest.BuildMessage(user+"@example.org", "r@example.net", subject, "Figures attached.\n")}); err != nil {
				t.Fatalf("%s message %d: %v", user, i+1, err)
			}
		}
		es := td.listed(user)
		if len(es) != 1 {
			t.Fatalf("%s: quarantine list:\n%s", user, entriesText(es))
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
