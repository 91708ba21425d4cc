//go:build integration

package daemon

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// TestIntegrationHoldThroughPolicy: a strict 10/hour hold limit answered
// through policy delegation puts messages 11-30 in Postfix's hold queue;
// quarantine thaw --sender --reset-rate releases them with postsuper -H.
func TestIntegrationHoldThroughPolicy(t *testing.T) {
	addr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr})
	td := startTestDaemon(t, testConfig(t, t.TempDir(), addr, "\n[quarantine]\n"+pf.HoldCommands()+`
[[limit]]
name = "tenhold"
key = ["sasl_username"]
limit = 10
period = "1h"
mode = "strict"
action = "hold"
via = ["policy"]
`))

	for i := 1; i <= 30; i++ {
		if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", i)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 10, 30*time.Second)
	_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 20 })
	if len(held) != 20 {
		t.Fatalf("%d held, want 20", len(held))
	}
	time.Sleep(500 * time.Millisecond)
	if n := sink.Count(); n != 10 {
		t.Fatalf("sink has %d, want 10 before thaw", n)
	}
	out := td.quarantineList(admin.ListQuery{Sender: "alice@example.org"})
	if !strings.Contains(out, "20 messages") || strings.Count(out, " held ") != 20 {
		t.Fatalf("quarantine list:\n%s", out)
	}
	first := strings.Fields(strings.Split(out, "\n")[1])[0]
	es := td.listed("")
	for _, id := range held {
		if !slices.ContainsFunc(es, func(e quarantine.Entry) bool { return e.QueueID == id }) {
			t.Fatalf("held queue ID %s not recorded:\n%s", id, entriesText(es))
		}
	}
	// show uses postcat for held mail.
	if out := td.show(first); !strings.Contains(out, "newsletter part") {
		t.Fatalf("quarantine show %s:\n%s", first, out)
	}
	out, err := td.thaw(lifecycle.Selection{Sender: "alice@example.org", ResetRate: true})
	if err != nil || !strings.Contains(out, "20 thawed, 0 failed") {
		t.Fatalf("thaw: %v\n%s", err, out)
	}
	msgs := sink.WaitCount(t, 30, 60*time.Second)
	pf.WaitQueueEmpty(t, 30*time.Second)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header("Subject")]++
	}
	for i := 1; i <= 30; i++ {
		if s := fmt.Sprintf("newsletter part %02d", i); seen[s] != 1 {
			t.Fatalf("%q delivered %d times", s, seen[s])
		}
	}
	// The rate was reset: alice can send again at once.
	if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", 31)); err != nil {
		t.Fatal(err)
	}
	sink.WaitCount(t, 31, 30*time.Second)
	if all, held := pf.QueueIDs(t); len(all) != 0 || len(held) != 0 {
		t.Fatalf("queue not empty: %v held %v", all, held)
	}
	if !strings.Contains(td.logs.String(), "alice has 1 quarantined message") || !strings.Contains(td.logs.String(), "alice has 20 quarantined messages") {
		t.Fatalf("no alert lines in the log:\n%s", td.logs.String())
	}
}

// TestIntegrationFreezeThroughMilter: Postfix with both the policy service
// and the milter; 30 messages from one SASL user against a strict 10/hour
// freeze limit: 10 delivered, 20 frozen; thaw --sender --reset-rate
// re-injects all 20 (30 in total, each once, byte-identical bodies) and the
// user can send again.
func TestIntegrationFreezeThroughMilter(t *testing.T) {
	addr, maddr := loopback(t), loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(),
		PolicyService: "inet:" + addr, Milter: "inet:" + maddr, ReinjectPort: true})
	td := startTestDaemon(t, testConfig(t, t.TempDir(), addr, fmt.Sprintf(`
[milter]
listen = %q

[quarantine]
reinject_addr = %q

[[limit]]
name = "tenfreeze"
key = ["sasl_username"]
limit = 10
period = "1h"
mode = "strict"
action = "freeze"
via = ["milter"]

[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 200
period = "1h"
via = ["policy"]
`, maddr, pf.ReinjectAddr)))
	// Before the daemon, Postfix's start-up probe found no milter; its
	// smtpd logs that asynchronously, so wait for the line (on a loaded
	// machine it came after the daemon had started, and the check below
	// took it for a warning of the test's own mail).
	for i := 0; !strings.Contains(pf.Log(), "Connection refused") && i < 250; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	logFrom := len(pf.Log())

	sent := map[string][]byte{}
	for i := 1; i <= 30; i++ {
		subj := fmt.Sprintf("newsletter part %02d", i)
		data := mtatest.BuildMessage("alice@example.org", "rcpt@example.net", subj,
			fmt.Sprintf("Dear reader,\nthis is part %d of the newsletter.\n=?utf-8?q?not_a_header?= \xc3\xa9\n", i))
		sent[subj] = mtatest.BodyOf(data)
		if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7",
			From: "alice@example.org", To: []string{"rcpt@example.net"}, Data: data}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 10, 30*time.Second)
	time.Sleep(time.Second)
	if n := sink.Count(); n != 10 {
		t.Fatalf("sink has %d before thaw, want 10", n)
	}
	pf.WaitQueueEmpty(t, 30*time.Second) // frozen mail was discarded by Postfix
	out := td.quarantineList(admin.ListQuery{})
	if !strings.Contains(out, "20 messages") || strings.Count(out, " frozen ") != 20 {
		t.Fatalf("quarantine list:\n%s", out)
	}
	for i := 11; i <= 30; i++ {
		if !strings.Contains(out, fmt.Sprintf("newsletter part %02d", i)) {
			t.Fatalf("list lacks the subject of message %d:\n%s", i, out)
		}
	}
	first := strings.Fields(strings.Split(out, "\n")[1])[0]
	if out := td.show(first); !strings.Contains(out, "Dear reader") || !strings.Contains(out, "tenfreeze") {
		t.Fatalf("quarantine show:\n%s", out)
	}
	out, err := td.thaw(lifecycle.Selection{Sender: "alice@example.org", ResetRate: true})
	if err != nil || !strings.Contains(out, "20 thawed, 0 failed") {
		t.Fatalf("thaw: %v\n%s", err, out)
	}
	sink.WaitCount(t, 30, 60*time.Second)
	time.Sleep(500 * time.Millisecond) // nothing more may arrive (no duplicates)
	msgs := sink.Messages()
	if len(msgs) != 30 {
		t.Fatalf("sink has %d messages after thaw, want 30", len(msgs))
	}
	seen := map[string]int{}
	thawed := 0
	for _, m := range msgs {
		subj := m.Header("Subject")
		seen[subj]++
		if !bytes.Equal(mtatest.BodyOf(m.Data), sent[subj]) {
			t.Errorf("%s: body differs:\n%q\nwant\n%q", subj, mtatest.BodyOf(m.Data), sent[subj])
		}
		if m.Header("X-Ratelimitd-Thawed") != "" {
			thawed++
			// The milter's copy keeps the trace Postfix's smtpd wrote on its own.
			if !regexp.MustCompile(`(?m)^Received: from \S+ \(\S+ \[192\.0\.2\.7\]\)\r?\n\s+by .* with ESMTPA id [0-9A-Za-z]+`).Match(m.Data) {
				t.Errorf("%s: no Received line with ESMTPA:\n%s", subj, m.Data[:min(len(m.Data), 1500)])
			}
			if m.From != "alice@example.org" || len(m.To) != 1 || m.To[0] != "rcpt@example.net" {
				t.Errorf("%s: envelope %s -> %v", subj, m.From, m.To)
			}
		}
	}
	if len(seen) != 30 || thawed != 20 {
		t.Fatalf("%d distinct subjects, %d thawed; want 30 and 20", len(seen), thawed)
	}
	// The rate was reset: alice sends again and is delivered, not frozen.
	if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", 31)); err != nil {
		t.Fatal(err)
	}
	sink.WaitCount(t, 31, 30*time.Second)
	if log := pf.Log()[logFrom:]; strings.Contains(log, "451 4.3.5") || strings.Contains(log, "warning:") {
		t.Fatalf("Postfix warnings:\n%s", log)
	}
	if !strings.Contains(td.logs.String(), "alice has 20 quarantined messages") {
		t.Fatalf("no alert line:\n%s", td.logs.String())
	}
}

// TestIntegrationThawFailureKeepsFrozen: a re-injection refused by the
// MTA leaves the message frozen with the error recorded.
func TestIntegrationThawFailureKeepsFrozen(t *testing.T) {
	maddr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), Milter: "inet:" + maddr})
	// Re-inject straight into the sink, which refuses the data.
	sink.SetReply(mtatest.StageEndOfData, &smtp.SMTPError{Code: 452, EnhancedCode: smtp.EnhancedCode{4, 3, 1}, Message: "disk full"})
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), fmt.Sprintf(`
[milter]
listen = %q
[quarantine]
reinject_addr = %q
[[limit]]
name = "one"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "freeze"
`, maddr, sink.Addr())))
	for i := 1; i <= 2; i++ {
		if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("bert", i)); err != nil {
			t.Fatal(err)
		}
	}
	out, err := td.thaw(lifecycle.Selection{Sender: "bert@example.org"})
	if err == nil || !strings.Contains(out, "452") {
		t.Fatalf("thaw into a refusing server: %v\n%s", err, out)
	}
	if es := td.listed(""); len(es) != 1 || es[0].State != quarantine.Frozen || !strings.Contains(es[0].Error, "disk full") || es[0].Attempts != 1 {
		t.Fatalf("entry after failed thaw:\n%s", entriesText(es))
	}
	// The postmaster gives up on it: delete drops it from the quarantine.
	out, err = td.deleteEntries(lifecycle.Selection{Sender: "bert@example.org"})
	if err != nil || !strings.Contains(out, "1 deleted, 0 failed") {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	if out := td.quarantineList(admin.ListQuery{}); !strings.Contains(out, "0 messages") {
		t.Fatalf("list after delete:\n%s", out)
	}
	if es, err := td.admin().List(t.Context(), admin.ListQuery{State: "deleted"}); err != nil || len(es) != 1 || es[0].State != quarantine.Deleted {
		t.Fatalf("deleted entry not kept for audit: %v\n%s", err, entriesText(es))
	}
}
