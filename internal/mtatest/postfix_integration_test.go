//go:build integration

package mtatest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// TestPostfixRelaysToSink sends three messages through a real Postfix as
// the XCLIENT user alice and checks that they reach the sink intact.
func TestPostfixRelaysToSink(t *testing.T) {
	t.Parallel()
	sink := StartSink(t)
	pf := StartPostfix(t, PostfixOptions{SinkAddr: sink.Addr()})

	type sent struct{ subject, body string }
	var want []sent
	for i := range 3 {
		s := sent{
			subject: fmt.Sprintf("test message %d", i),
			body:    fmt.Sprintf("Hello %d.\n.leading dot\nlast line ünïcode\n", i),
		}
		want = append(want, s)
		res := SendResult(t, pf.Addr(), Mail{
			Login:      "alice",
			ClientAddr: "192.0.2.7",
			From:       "alice@example.org",
			To:         []string{"bob@example.net"},
			Data:       BuildMessage("alice@example.org", "bob@example.net", s.subject, s.body),
		})
		if err := res.Err(); err != nil {
			t.Fatalf("send %d: %v\n%s", i, err, res.Transcript)
		}
		if res.QueueID == "" {
			t.Errorf("send %d: no queue ID in reply %q", i, res.Reply)
		}
	}

	msgs := sink.WaitCount(t, 3, 20*time.Second)
	if len(msgs) != 3 {
		t.Fatalf("sink has %d messages, want 3", len(msgs))
	}
	got := make(map[string]Message)
	for _, m := range msgs {
		got[m.Header("Subject")] = m
	}
	for _, w := range want {
		m, ok := got[w.subject]
		if !ok {
			t.Errorf("no message with Subject %q at the sink", w.subject)
			continue
		}
		wantBody := strings.ReplaceAll(w.body, "\n", "\r\n")
		if string(m.Body()) != wantBody {
			t.Errorf("Subject %q: body %q, want %q", w.subject, m.Body(), wantBody)
		}
		if m.From != "alice@example.org" || len(m.To) != 1 || m.To[0] != "bob@example.net" {
			t.Errorf("Subject %q: envelope %q -> %q", w.subject, m.From, m.To)
		}
		if !bytes.Contains(m.Data, []byte("Received: from ")) {
			t.Errorf("Subject %q: no Received header from Postfix", w.subject)
		}
	}

	pf.WaitQueueEmpty(t, 10*time.Second)
	// The directories the harness made pass Postfix's own checks, whose
	// complaints go to the log as "warning: ..." lines.
	if out, err := pf.Command("postfix", "check").CombinedOutput(); err != nil || len(out) != 0 {
		t.Errorf("postfix -c %s check: %v\n%s", pf.ConfigDir(), err, out)
	}
	log := pf.WaitLog(t, "status=sent", 5*time.Second)
	for _, bad := range []string{"fatal", "panic:", "451 4.3.5", "warning: ", "error: "} {
		if strings.Contains(log, bad) {
			t.Errorf("Postfix log contains %q:\n%s", bad, log)
		}
	}
	if !strings.Contains(log, "sasl_username=alice") {
		t.Errorf("Postfix log has no sasl_username=alice (XCLIENT LOGIN not honoured):\n%s", log)
	}
}

// TestPolicyDeferAndHold runs Postfix against a tiny inline policy server:
// DEFER_IF_PERMIT at RCPT must reach the client as 450 4.7.1, and HOLD at
// END-OF-MESSAGE must put the message in the hold queue, from which Release
// delivers it.
func TestPolicyDeferAndHold(t *testing.T) {
	t.Parallel()
	sink := StartSink(t)
	policy := startFakePolicy(t)
	pf := StartPostfix(t, PostfixOptions{
		SinkAddr:      sink.Addr(),
		PolicyService: "inet:" + policy.addr(),
	})
	mail := Mail{
		Login:      "alice",
		ClientAddr: "192.0.2.7",
		From:       "alice@example.org",
		To:         []string{"bob@example.net"},
		Data:       BuildMessage("alice@example.org", "bob@example.net", "held", "held body\n"),
	}

	// RCPT: defer.
	policy.set("RCPT", "DEFER_IF_PERMIT 4.7.1 slow down")
	res := SendResult(t, pf.Addr(), mail)
	var se *smtp.SMTPError
	if err := res.Err(); !errors.As(err, &se) {
		t.Fatalf("send with DEFER_IF_PERMIT: error %v, want an *smtp.SMTPError\n%s", err, res.Transcript)
	}
	if se.Code != 450 || se.EnhancedCode != (smtp.EnhancedCode{4, 7, 1}) || !strings.Contains(se.Message, "slow down") {
		t.Errorf("RCPT reply %d %v %q, want 450 4.7.1 ... slow down", se.Code, se.EnhancedCode, se.Message)
	}
	var sendErr *SendError
	if !errors.As(res.Err(), &sendErr) || sendErr.Stage != StageRcpt || sendErr.Rcpt != "bob@example.net" || sendErr.Code() != 450 {
		t.Errorf("error %#v, want a SendError at %s for bob@example.net", sendErr, StageRcpt)
	}

	// END-OF-MESSAGE: hold.
	policy.set("RCPT", "DUNNO")
	policy.set("END-OF-MESSAGE", "HOLD held by test")
	res = SendResult(t, pf.Addr(), mail)
	if err := res.Err(); err != nil {
		t.Fatalf("send with HOLD: %v\n%s", err, res.Transcript)
	}
	_, held := pf.QueueIDs(t)
	if len(held) != 1 || held[0] != res.QueueID {
		t.Fatalf("held queue IDs %v, want [%s]", held, res.QueueID)
	}
	if cat := pf.Cat(t, res.QueueID); !strings.Contains(cat, "held body") {
		t.Errorf("postcat -q %s has no body:\n%s", res.QueueID, cat)
	}
	if n := sink.Count(); n != 0 {
		t.Fatalf("sink got %d messages while the message was held", n)
	}

	postsuper(t, pf, "-H", res.QueueID, "Released from hold: 1 message")
	msgs := sink.WaitCount(t, 1, 15*time.Second)
	if got := msgs[0].Header("Subject"); got != "held" {
		t.Errorf("delivered Subject %q, want %q", got, "held")
	}
	pf.WaitQueueEmpty(t, 10*time.Second)

	// What the policy service saw (Postfix SMTPD_POLICY_README, "Policy protocol description").
	reqs := policy.requests()
	var rcpt, eod map[string]string
	for _, r := range reqs {
		switch r["protocol_state"] {
		case "RCPT":
			rcpt = r
		case "END-OF-MESSAGE":
			eod = r
		}
	}
	if rcpt == nil || eod == nil {
		t.Fatalf("policy requests lack RCPT or END-OF-MESSAGE: %v", reqs)
	}
	for _, r := range []map[string]string{rcpt, eod} {
		if r["sasl_username"] != "alice" || r["client_address"] != "192.0.2.7" || r["request"] != "smtpd_access_policy" {
			t.Errorf("policy request %v: want sasl_username=alice client_address=192.0.2.7", r)
		}
	}
	if rcpt["queue_id"] != "" || eod["queue_id"] != res.QueueID || eod["recipient_count"] != "1" {
		t.Errorf("RCPT queue_id %q, END-OF-MESSAGE queue_id %q recipient_count %q; want \"\", %q, 1",
			rcpt["queue_id"], eod["queue_id"], eod["recipient_count"], res.QueueID)
	}

	// A second held message is deleted instead; postqueue -f leaves hold alone.
	res = SendResult(t, pf.Addr(), mail)
	if err := res.Err(); err != nil {
		t.Fatalf("second send with HOLD: %v", err)
	}
	pf.run(t, "postqueue", "-f")
	if _, held := pf.QueueIDs(t); len(held) != 1 || held[0] != res.QueueID {
		t.Fatalf("held queue IDs after postqueue -f %v, want [%s]", held, res.QueueID)
	}
	postsuper(t, pf, "-d", res.QueueID, "Deleted: 1 message")
	if all, _ := pf.QueueIDs(t); len(all) != 0 {
		t.Errorf("queue after postsuper -d: %v", all)
	}
	if n := sink.Count(); n != 1 {
		t.Errorf("sink has %d messages, want 1", n)
	}
	if log := pf.Log(); strings.Contains(log, "451 4.3.5") || strings.Contains(log, "fatal") {
		t.Errorf("Postfix log has a configuration error:\n%s", log)
	}
}

// TestReinjectPort checks the second smtpd: no policy service, open to
// 127.0.0.1 only through permit_mynetworks.
func TestReinjectPort(t *testing.T) {
	t.Parallel()
	sink := StartSink(t)
	policy := startFakePolicy(t)
	policy.set("RCPT", "REJECT 5.7.1 not here")
	pf := StartPostfix(t, PostfixOptions{
		SinkAddr:      sink.Addr(),
		PolicyService: "inet:" + policy.addr(),
		ReinjectPort:  true,
	})
	if pf.ReinjectAddr == "" || pf.ReinjectAddr == pf.Addr() {
		t.Fatalf("ReinjectAddr %q (Addr %q)", pf.ReinjectAddr, pf.Addr())
	}
	mail := Mail{
		From: "alice@example.org",
		To:   []string{"bob@example.net"},
		Data: BuildMessage("alice@example.org", "bob@example.net", "thawed", "thawed body\n"),
	}
	if err := Send(t, pf.Addr(), mail); !errors.As(err, new(*smtp.SMTPError)) {
		t.Fatalf("send to the policy-checked port: %v, want a 5xx rejection", err)
	}
	if err := Send(t, pf.ReinjectAddr, mail); err != nil {
		t.Fatalf("send to the re-injection port: %v", err)
	}
	sink.WaitCount(t, 1, 15*time.Second)
	// An outside client may not relay through the re-injection port.
	mail.ClientAddr = "192.0.2.7"
	var se *smtp.SMTPError
	if err := Send(t, pf.ReinjectAddr, mail); !errors.As(err, &se) || se.Code/100 != 5 {
		t.Errorf("relay from 192.0.2.7 via the re-injection port: %v, want 5xx", err)
	}
}

// TestMilterUnavailableTempfails checks the Milter option: with nothing
// listening at the milter address, milter_default_action = tempfail makes
// Postfix answer 451 4.7.1.
func TestMilterUnavailableTempfails(t *testing.T) {
	t.Parallel()
	pf := StartPostfix(t, PostfixOptions{Milter: "inet:127.0.0.1:" + strconv.Itoa(FreePort(t))})
	res := SendResult(t, pf.Addr(), Mail{
		From: "a@example.org",
		To:   []string{"b@example.net"},
		Data: BuildMessage("a@example.org", "b@example.net", "s", "b\n"),
	})
	var se *smtp.SMTPError
	if err := res.Err(); !errors.As(err, &se) || se.Code != 451 || se.EnhancedCode != (smtp.EnhancedCode{4, 7, 1}) {
		t.Fatalf("error %v, want 451 4.7.1\n%s", err, res.Transcript)
	}
	pf.WaitLog(t, "milter-reject", 5*time.Second)
}

// fakePolicy is a minimal Postfix policy server: it reads attribute lines
// up to an empty line and answers "action=...", keeping each connection
// open for further requests as Postfix expects.
type fakePolicy struct {
	ln      net.Listener
	mu      sync.Mutex
	actions map[string]string // by protocol_state; default DUNNO
	reqs    []map[string]string
}

func startFakePolicy(t *testing.T) *fakePolicy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &fakePolicy{ln: ln, actions: make(map[string]string)}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	var conns sync.Map
	t.Cleanup(func() {
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				p.serve(c)
			}()
		}
	}()
	return p
}

func (p *fakePolicy) addr() string { return p.ln.Addr().String() }

func (p *fakePolicy) set(state, action string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.actions[state] = action
}

func (p *fakePolicy) requests() []map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]map[string]string(nil), p.reqs...)
}

func (p *fakePolicy) serve(c net.Conn) {
	r := bufio.NewReader(c)
	req := make(map[string]string)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			k, v, _ := strings.Cut(line, "=")
			req[k] = v
			continue
		}
		p.mu.Lock()
		p.reqs = append(p.reqs, req)
		action := p.actions[req["protocol_state"]]
		p.mu.Unlock()
		if action == "" {
			action = "DUNNO"
		}
		if _, err := fmt.Fprintf(c, "action=%s\n\n", action); err != nil {
			return
		}
		req = make(map[string]string)
	}
}

// postsuper runs "postsuper flag id" on pf, failing unless it says want.
func postsuper(t *testing.T, pf *Postfix, flag, id, want string) {
	t.Helper()
	if _, stderr := pf.run(t, "postsuper", flag, id); !strings.Contains(stderr, want) {
		t.Fatalf("postsuper %s %s did not say %q: %s", flag, id, want, stderr)
	}
}
