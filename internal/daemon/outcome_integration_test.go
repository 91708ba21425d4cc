//go:build integration

package daemon

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestIntegrationUnknownRecipientsFreezeThroughTheMaillog: a real Postfix
// asks the policy service and the milter and relays to a sink. bob sends
// 100 messages of which 2 bounce and is never refused; alice sends 30
// messages to unknown recipients (the sink answers 550 5.1.1), under the
// 200/h volume limit: the mail log feed counts each bounce, and the first
// message after the 10th is frozen, as are the rest.
func TestIntegrationUnknownRecipientsFreezeThroughTheMaillog(t *testing.T) {
	unknownRecipientsFreeze(t, nil, func(pf *mtatest.Postfix) string {
		return fmt.Sprintf("maillog = %q\npoll = \"50ms\"\n", pf.LogFile())
	})
}

// TestIntegrationUnknownRecipientsFreezeThroughNotices: the same through
// Postfix's postmaster notices (notify_classes) routed to the daemon's
// LMTP listener, without the mail log.
func TestIntegrationUnknownRecipientsFreezeThroughNotices(t *testing.T) {
	lmtpAddr := loopback(t)
	notices := "bounces@ratelimitd.invalid"
	unknownRecipientsFreeze(t, map[string]string{
		"notify_classes":           "bounce, delay, 2bounce",
		"bounce_notice_recipient":  notices,
		"delay_notice_recipient":   notices,
		"2bounce_notice_recipient": notices,
		"transport_maps":           "inline:{ratelimitd.invalid=lmtp:inet:" + lmtpAddr + "}",
	}, func(*mtatest.Postfix) string { return fmt.Sprintf("notices_listen = %q\n", lmtpAddr) })
}

// outcomeMTA is a real Postfix asking the daemon's policy service and
// milter, relaying to a sink, with the volume limit and the unknown_rcpt
// freeze limit of the scenarios.
type outcomeMTA struct {
	t    *testing.T
	pf   *mtatest.Postfix
	sink *mtatest.Sink
	td   *testDaemon
}

// startOutcomeMTA starts it with Postfix's main.cf extended by mainCF and
// the [outcome] table feed(pf).
func startOutcomeMTA(t *testing.T, mainCF map[string]string, feed func(pf *mtatest.Postfix) string) *outcomeMTA {
	dir := t.TempDir()
	policyAddr, milterAddr := loopback(t), loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + policyAddr,
		Milter: "inet:" + milterAddr, ExtraMainCF: mainCF})
	path := testConfig(t, dir, policyAddr, fmt.Sprintf(`
[milter]
listen = %q

[outcome]
%s

[[limit]]
name = "hourly"
key = "sasl_username"
limit = 200
period = "1h"
via = ["policy"]

[[limit]]
name = "unknown"
key = "sasl_username"
per = "unknown_rcpt"
limit = 10
period = "1h"
action = "freeze"
via = ["milter"]
`, milterAddr, feed(pf)))
	return &outcomeMTA{t: t, pf: pf, sink: sink, td: startTestDaemon(t, path)}
}

// send sends a message of user (login, if login) from client 192.0.2.7 to rcpt.
func (m *outcomeMTA) send(user, rcpt string, login bool) error {
	m.t.Helper()
	mail := mtatest.Mail{ClientAddr: "192.0.2.7", From: user + "@example.org", To: []string{rcpt},
		Data: mtatest.BuildMessage(user+"@example.org", rcpt, "hello "+rcpt, "Hello.\n")}
	if login {
		mail.Login = user
	} else {
		mail.ClientAddr = "192.0.2.99"
	}
	return mtatest.Send(m.t, m.pf.Addr(), mail)
}

// outcomeOf waits for the fate of the message to rcpt in Postfix's log:
// sent, bounced or frozen.
func (m *outcomeMTA) outcomeOf(rcpt string) string {
	m.t.Helper()
	re := regexp.MustCompile(`(status=(sent|bounced)|milter-discard).*` + regexp.QuoteMeta(rcpt) + `|to=<` + regexp.QuoteMeta(rcpt) + `>.*status=(sent|bounced)`)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if found := re.FindString(m.pf.Log()); found != "" {
			switch {
			case strings.Contains(found, "milter-discard"):
				return "frozen"
			case strings.Contains(found, "status=bounced"):
				return "bounced"
			default:
				return "sent"
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.t.Fatalf("no outcome for %s in the Postfix log", rcpt)
	return ""
}

// unknownRecipientsFreeze runs the scenario with Postfix's main.cf
// extended by mainCF and the [outcome] table feed(pf).
func unknownRecipientsFreeze(t *testing.T, mainCF map[string]string, feed func(pf *mtatest.Postfix) string) {
	m := startOutcomeMTA(t, mainCF, feed)
	sink, td, outcomeOf := m.sink, m.td, m.outcomeOf
	send := func(user, rcpt string) {
		t.Helper()
		if err := m.send(user, rcpt, true); err != nil {
			t.Fatalf("%s to %s: %v", user, rcpt, err)
		}
	}
	unknown := &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "no such user here"}

	for i := range 100 {
		rcpt := fmt.Sprintf("bob%d@example.net", i)
		bounce := i == 30 || i == 70
		if bounce {
			sink.SetReply(mtatest.StageRcpt, unknown)
		}
		send("bob", rcpt)
		want := "sent"
		if bounce {
			want = "bounced"
		}
		if got := outcomeOf(rcpt); got != want {
			t.Fatalf("bob's message %d: %s, want %s", i+1, got, want)
		}
		sink.SetReply(mtatest.StageRcpt, nil)
	}

	sink.SetReply(mtatest.StageRcpt, unknown)
	for i := range 30 {
		rcpt := fmt.Sprintf("nobody%d@example.net", i)
		send("alice", rcpt)
		got := outcomeOf(rcpt)
		want := "bounced"
		if i >= 10 {
			want = "frozen"
		}
		if got != want {
			t.Fatalf("alice's message %d: %s, want %s\n%s", i+1, got, want, td.logs.String())
		}
		if got == "bounced" { // the next message is decided after the feed has read it
			td.waitRate("alice", float64(i+1)*0.98)
		}
	}
	entries, err := td.q.svc.List(quarantine.Filter{})
	if err != nil || len(entries) != 20 {
		t.Errorf("%d messages in the quarantine (%v), want alice's last 20", len(entries), err)
	}
}

// TestIntegrationNoQueueRejectsFreezeThroughTheMaillog: a real Postfix
// rejects unknown recipients itself (check_recipient_access, 550 5.1.1);
// its NOQUEUE lines count for alice's login, which the daemon saw with her
// client and sender, and the message after her 10th rejected recipient is
// frozen. A reject of an unauthenticated client using her address counts
// nothing.
func TestIntegrationNoQueueRejectsFreezeThroughTheMaillog(t *testing.T) {
	m := startOutcomeMTA(t, map[string]string{"smtpd_relay_restrictions": "check_recipient_access " +
		"inline:{ { unknown.example.net = 550 5.1.1 User unknown } }, permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"},
		func(pf *mtatest.Postfix) string { return fmt.Sprintf("maillog = %q\npoll = \"50ms\"\n", pf.LogFile()) })
	if err := m.send("alice", "first@example.net", true); err != nil || m.outcomeOf("first@example.net") != "sent" {
		t.Fatalf("alice's first message: %v", err)
	}
	rejected := func(user, rcpt string, login bool) {
		t.Helper()
		if err := m.send(user, rcpt, login); err == nil || !strings.Contains(err.Error(), "550") {
			t.Fatalf("%s to %s: %v, want 550 5.1.1", user, rcpt, err)
		}
	}
	rejected("alice", "forged@unknown.example.net", false)
	for i := range 10 {
		rejected("alice", fmt.Sprintf("nobody%d@unknown.example.net", i), true)
		m.td.waitRate("alice", float64(i+1)*0.98)
	}
	if r := m.td.unknownRate("alice"); r > 10.5 {
		t.Errorf("alice's unknown-recipient rate %v: the forged reject counted", r)
	}
	if err := m.send("alice", "last@example.net", true); err != nil || m.outcomeOf("last@example.net") != "frozen" {
		t.Fatalf("alice's message after 10 rejects: %v, %s, want frozen\n%s", err, m.outcomeOf("last@example.net"), m.pf.Log())
	}
}
