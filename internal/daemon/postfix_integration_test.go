//go:build integration

package daemon

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestIntegrationPostfixPolicy runs a real Postfix whose
// check_policy_service points at ratelimitd, and real SMTP sessions as SASL
// users (XCLIENT LOGIN=).
func TestIntegrationPostfixPolicy(t *testing.T) {
	addr := loopback(t)
	cfgPath := testConfig(t, t.TempDir(), addr, "")
	td := startTestDaemon(t, cfgPath)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr})

	// alice sends 250: the hourly burst of 200 passes, then 450 4.7.1.
	accepted, deferred := 0, 0
	for i := 1; i <= 250; i++ {
		err := sendAs(t, pf, "alice", i)
		if err == nil {
			accepted++
			if deferred > 0 {
				t.Fatalf("message %d accepted after a deferral", i)
			}
			continue
		}
		code, enh := smtpCode(err)
		if code != 450 || enh != "4.7.1" {
			t.Fatalf("message %d: %v (want 450 4.7.1)", i, err)
		}
		deferred++
	}
	if accepted != 200 || deferred != 50 {
		t.Fatalf("alice: %d accepted, %d deferred; want 200 and 50\n%s", accepted, deferred, td.logs.String())
	}
	// Another user is unaffected.
	for i := 1; i <= 5; i++ {
		if err := sendAs(t, pf, "bob", i); err != nil {
			t.Fatalf("bob message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 205, 60*time.Second)

	if out := td.rateShow("alice"); !strings.Contains(out, "hourly") || !strings.Contains(out, "at limit: allowed again in") {
		t.Fatalf("rate show alice:\n%s", out)
	}
	if out := td.rateList(true); !strings.Contains(out, "alice") || strings.Contains(out, "bob") {
		t.Fatalf("rate list --over:\n%s", out)
	}
	if out := td.statusText(); !strings.Contains(out, "defer") {
		t.Fatalf("status:\n%s", out)
	}
	// The operator resets alice: she can send again at once.
	if res, err := td.admin().Reset(t.Context(), "alice", ""); err != nil || res.Removed != 2 {
		t.Fatalf("rate reset: %v %+v", err, res)
	}
	if !strings.Contains(td.logs.String(), "rate reset") {
		t.Fatalf("reset not logged:\n%s", td.logs.String())
	}
	if err := sendAs(t, pf, "alice", 251); err != nil {
		t.Fatalf("alice after reset: %v", err)
	}

	// carol fills her hourly burst; a restart of the daemon keeps it.
	for i := 1; i <= 200; i++ {
		if err := sendAs(t, pf, "carol", i); err != nil {
			t.Fatalf("carol message %d: %v", i, err)
		}
	}
	td.stop()
	td = startTestDaemon(t, cfgPath)
	err := sendAs(t, pf, "carol", 201)
	if code, _ := smtpCode(err); code != 450 {
		t.Fatalf("carol after daemon restart: %v (want 450: state must survive)", err)
	}
	sink.WaitCount(t, 406, 60*time.Second)
	if log := pf.Log(); strings.Contains(log, "451 4.3.5") || strings.Contains(log, "problem talking to server") {
		t.Fatalf("Postfix saw a policy protocol error:\n%s", log)
	}
	if !strings.Contains(td.logs.String()+pf.Log(), "450 4.7.1") {
		t.Fatal("no 450 4.7.1 in the logs")
	}
}

// TestIntegrationPostfixReplyText: the reply a client gets from a real
// Postfix when the policy service defers at RCPT is the one README.md and
// docs/postfix.md quote: Postfix puts "<RECIPIENT>: Recipient address
// rejected: " before the daemon's text.
func TestIntegrationPostfixReplyText(t *testing.T) {
	addr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr})
	startTestDaemon(t, testConfig(t, t.TempDir(), addr, `
[[limit]]
name = "hourly"
key = ["sasl_username"]
limit = 1
period = "1h"
message = "too much mail from {key}: {rate} messages per {period} (limit {limit}); try again in {retry}"
`))
	if err := sendAs(t, pf, "alice", 1); err != nil {
		t.Fatal(err)
	}
	err := sendAs(t, pf, "alice", 2)
	var se *smtp.SMTPError
	if !errors.As(err, &se) {
		t.Fatalf("second message: %v, want a 450", err)
	}
	want := "<rcpt@example.net>: Recipient address rejected: too much mail from alice: 2.0 messages per 1h (limit 1); try again in "
	if se.Code != 450 || se.EnhancedCode != (smtp.EnhancedCode{4, 7, 1}) || !strings.HasPrefix(se.Message, want) {
		t.Fatalf("reply %d %v %q, want 450 4.7.1 %q...", se.Code, se.EnhancedCode, se.Message, want)
	}
	t.Logf("Postfix answered: %d %d.%d.%d %s", se.Code, se.EnhancedCode[0], se.EnhancedCode[1], se.EnhancedCode[2], se.Message)
}
