package milter

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

func TestPass(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		t.Run(network, func(t *testing.T) {
			env := start(t, network, &Server{})
			s := env.session(t)
			connect(t, s)
			rcpts, mods, act := transaction(t, s, "alice@example.com",
				[]string{"bob@example.org", "carol@example.org"}, simpleMsg, "4XyZ1abc")
			for i, a := range rcpts {
				if a.Code != gomilter.ActContinue {
					t.Errorf("rcpt %d: %q", i, a.Code)
				}
			}
			if len(mods) != 0 || act.Code != gomilter.ActAccept {
				t.Fatalf("end: mods %v, action %q; want accept", mods, act.Code)
			}

			reqs := env.dec.requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 2 RCPT + 1 EOM: %+v", len(reqs), reqs)
			}
			for i, r := range reqs {
				if r.Stage != policy.ViaMilter || r.SASLUsername != "alice" || r.SASLMethod != "PLAIN" ||
					r.Sender != "alice@example.com" || r.ClientAddress != "192.0.2.7" ||
					r.ClientName != "client.example.com" || r.HeloName != "client.example.com" {
					t.Errorf("request %d: %+v", i, r)
				}
				if r.Instance == "" || r.Instance != reqs[0].Instance {
					t.Errorf("request %d: instance %q, want one per message", i, r.Instance)
				}
			}
			if r := reqs[0]; r.ProtocolState != policy.StateRcpt || r.Recipient != "bob@example.org" || r.RecipientCount != 0 {
				t.Errorf("first RCPT request: %+v", r)
			}
			eom := reqs[2]
			want := simpleMsg.want()
			if eom.ProtocolState != policy.StateEndOfMessage || eom.RecipientCount != 2 ||
				eom.Size != int64(len(want)) || eom.QueueID != "4XyZ1abc" || eom.Recipient != "" {
				t.Errorf("EOM request: %+v (want size %d)", eom, len(want))
			}
		})
	}
}

// TestConnectMacros: Postfix's "[address]" name form and macro overrides.
func TestConnectMacros(t *testing.T) {
	env := start(t, "tcp", &Server{})
	s := env.session(t)
	if err := s.Macros(gomilter.CodeConn, "{client_ptr}", "ptr.example.com"); err != nil {
		t.Fatal(err)
	}
	cont(t, "conn")(s.Conn("[2001:db8::1]", gomilter.FamilyInet6, 41000, "2001:db8::1"))
	cont(t, "helo")(s.Helo("[2001:db8::1]"))
	transaction(t, s, "", []string{"bob@example.org"}, simpleMsg, "Q1")
	r := env.dec.eom()[0]
	if r.ClientAddress != "2001:db8::1" || r.ClientName != "unknown" || r.ReverseClientName != "ptr.example.com" ||
		r.Sender != "" || r.Recipient != "bob@example.org" {
		t.Errorf("request: %+v", r)
	}
}

func TestRcptDeferOneRecipient(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.Recipient == "carol@example.org" && req.ProtocolState == policy.StateRcpt {
			return policy.Decision{Action: policy.Defer, Code: 450, Enhanced: "4.7.1",
				Text: "Rate limit 100% exceeded for alice", Limit: "hourly"}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	rcpts, _, act := transaction(t, s, "alice@example.com",
		[]string{"bob@example.org", "carol@example.org", "dave@example.org"}, simpleMsg, "Q1")
	if rcpts[0].Code != gomilter.ActContinue || rcpts[2].Code != gomilter.ActContinue {
		t.Errorf("other recipients: %q %q, want continue", rcpts[0].Code, rcpts[2].Code)
	}
	if a := rcpts[1]; a.Code != gomilter.ActReplyCode || a.SMTPCode != 450 ||
		a.SMTPText != "4.7.1 Rate limit 100%% exceeded for alice" {
		t.Errorf("deferred recipient: %q %d %q", a.Code, a.SMTPCode, a.SMTPText)
	}
	if act.Code != gomilter.ActAccept {
		t.Errorf("end: %q, want accept", act.Code)
	}
	if eom := env.dec.eom(); eom[0].RecipientCount != 2 {
		t.Errorf("EOM recipient_count %d, want 2", eom[0].RecipientCount)
	}
}

func TestRcptReject(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateRcpt {
			// A code of the wrong class is replaced by the default.
			return policy.Decision{Action: policy.Reject, Code: 450, Enhanced: "4.7.1", Text: "no"}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	rcpts, _, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if a := rcpts[0]; a.Code != gomilter.ActReplyCode || a.SMTPCode != 550 || a.SMTPText != "5.7.1 no" {
		t.Errorf("rejected recipient: %q %d %q", a.Code, a.SMTPCode, a.SMTPText)
	}
	if act != nil {
		t.Errorf("message with no recipient reached its end")
	}
	// The session goes on: a second message on the same connection.
	dec.mu.Lock()
	dec.rule = nil
	dec.mu.Unlock()
	_, _, act = transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q2")
	if act.Code != gomilter.ActAccept {
		t.Errorf("second message: %q", act.Code)
	}
}

func TestEndOfMessageDeferReject(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    policy.Decision
		code int
		text string
	}{
		{"defer", policy.Decision{Action: policy.Defer, Code: 451, Enhanced: "4.7.0", Text: "slow down"}, 451, "4.7.0 slow down"},
		{"defer-defaults", policy.Decision{Action: policy.Defer}, 450, "4.7.1 " + mta.DeferText},
		{"reject", policy.Decision{Action: policy.Reject, Code: 554, Enhanced: "5.7.1", Text: "too much\r\nmail"}, 554, "5.7.1 too much mail"},
		{"reject-bad-enhanced", policy.Decision{Action: policy.Reject, Code: 550, Enhanced: "4.7.1", Text: "x"}, 550, "5.7.1 x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
				if req.ProtocolState == policy.StateEndOfMessage {
					return tc.d
				}
				return policy.Decision{}
			}}
			env := start(t, "tcp", &Server{Decider: dec})
			s := env.session(t)
			connect(t, s)
			_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
			if len(mods) != 0 || act.Code != gomilter.ActReplyCode || act.SMTPCode != tc.code || act.SMTPText != tc.text {
				t.Errorf("end: mods %v, %q %d %q; want %d %q", mods, act.Code, act.SMTPCode, act.SMTPText, tc.code, tc.text)
			}
			frozen, held := env.q.snapshot()
			if len(frozen)+len(held) != 0 {
				t.Error("quarantine used")
			}
		})
	}
}

func TestWarnAddsHeader(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Warn, Header: "X-RateLimit-Warn: hourly 210/200", Limit: "hourly"}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActAccept {
		t.Fatalf("end: %q, want accept", act.Code)
	}
	if len(mods) != 1 || mods[0].Code != gomilter.ActAddHeader ||
		mods[0].HeaderName != "X-RateLimit-Warn" || mods[0].HeaderValue != "hourly 210/200" {
		t.Fatalf("modifications: %+v", mods)
	}
}

// TestRcptFreezeOutranksWarn: a Freeze decided at RCPT is carried out at
// the end of the message even though the END-OF-MESSAGE decision is Warn (a
// warning never answers), and Warn headers from RCPT are deduplicated.
func TestRcptFreezeOutranksWarn(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		switch {
		case req.ProtocolState == policy.StateRcpt && req.Recipient == "bob@example.org":
			return policy.Decision{Action: policy.Freeze, Limit: "strict-mua", Key: "alice"}
		case req.ProtocolState == policy.StateEndOfMessage:
			return policy.Decision{Action: policy.Warn, Header: "X-W: 1"}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org", "carol@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActDiscard || len(mods) != 0 {
		t.Fatalf("end: %q mods %v, want discard", act.Code, mods)
	}
	frozen, _ := env.q.snapshot()
	if len(frozen) != 1 || frozen[0].d.Limit != "strict-mua" ||
		strings.Join(frozen[0].msg.Recipients, ",") != "bob@example.org,carol@example.org" {
		t.Fatalf("frozen: %+v", frozen)
	}

	// Warn at RCPT for two recipients (same header) and Pass at EOM: one
	// header.
	dec.mu.Lock()
	dec.rule = func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateRcpt {
			return policy.Decision{Action: policy.Warn, Header: "X-W:   two"}
		}
		return policy.Decision{}
	}
	dec.mu.Unlock()
	_, mods, act = transaction(t, s, "a@example.com", []string{"bob@example.org", "carol@example.org"}, simpleMsg, "Q2")
	if act.Code != gomilter.ActAccept || len(mods) != 1 || mods[0].HeaderName != "X-W" || mods[0].HeaderValue != "two" {
		t.Fatalf("warn at RCPT: %q %+v", act.Code, mods)
	}
}

func TestHold(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Hold, Limit: "daily", Key: "alice", Reason: "daily limit 1000"}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	_, mods, act := transaction(t, s, "alice@example.com", []string{"bob@example.org"}, simpleMsg, "4HOLDQ1")
	if act.Code != gomilter.ActAccept {
		t.Fatalf("end: %q, want accept", act.Code)
	}
	if len(mods) != 1 || mods[0].Code != gomilter.ActQuarantine || !strings.Contains(mods[0].Reason, "daily") {
		t.Fatalf("modifications: %+v, want one quarantine", mods)
	}
	_, held := env.q.snapshot()
	if len(held) != 1 || held[0].msg.Request.QueueID != "4HOLDQ1" || held[0].d.Key != "alice" ||
		held[0].msg.Request.SASLUsername != "alice" || held[0].msg.Recipients[0] != "bob@example.org" {
		t.Fatalf("held: %+v", held)
	}
}

// TestHoldRecordFails: a hold that cannot be recorded is deferred (450
// 4.7.1), never held untracked.
func TestHoldRecordFails(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		return policy.Decision{Action: policy.Hold}
	}}
	q := &fakeQuarantine{holdErr: errors.New("disk full")}
	env := start(t, "tcp", &Server{Decider: dec, Quarantine: q})
	s := env.session(t)
	connect(t, s)
	_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActReplyCode || act.SMTPCode != 450 || len(mods) != 0 {
		t.Fatalf("end: %q %d %+v, want 450 and no quarantine", act.Code, act.SMTPCode, mods)
	}
}

// TestHoldWithoutQuarantineAction: an MTA that does not offer
// SMFIF_QUARANTINE cannot hold; the message is temp-failed, not accepted.
func TestHoldWithoutQuarantineAction(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		return policy.Decision{Action: policy.Hold, Header: "X-A: b"}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.sessionWith(t, gomilter.OptAddHeader)
	connect(t, s)
	_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActReplyCode || act.SMTPCode != 451 || len(mods) != 0 {
		t.Fatalf("end: %q %d %q %+v, want 451", act.Code, act.SMTPCode, act.SMTPText, mods)
	}
	if _, held := env.q.snapshot(); len(held) != 0 {
		t.Error("hold recorded although the MTA cannot hold")
	}
}

// richMsg has folded headers, an empty header value, 8-bit and NUL-free
// binary body bytes, a chunk boundary inside CRLF, and no final CRLF.
var richMsg = testMsg{
	headers: [][2]string{
		{"Received", "from client.example.com (client.example.com [192.0.2.7])\n\tby mx.example.net (Postfix) with ESMTPSA id 4XyZ1abc\n\tfor <bob@example.org>; Mon, 1 Jan 2024 00:00:00 +0000 (UTC)"},
		{"DKIM-Signature", "v=1; a=rsa-sha256; c=relaxed/relaxed;\n d=example.com; s=s1;\n b=abc"},
		{"From", "=?UTF-8?Q?Al=C3=AFce?= <alice@example.com>"},
		{"X-Empty", ""},
		{"Subject", "  two leading spaces, a\ttab and 100%"},
	},
	body: [][]byte{
		[]byte("line 1\r\nline 2 \xc3\xa9\xff\r"),
		[]byte("\n.\r\n..dot\r\n"),
		bytes.Repeat([]byte("0123456789abcdef"), 4096)[:gomilter.MaxBodyChunk], // a full chunk
		[]byte("\r\nno final newline"),
	},
}

func TestFreezeByteIdentical(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Freeze, Limit: "mua", Key: "alice"}
		}
		return policy.Decision{}
	}}
	env := start(t, "unix", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	_, mods, act := transaction(t, s, "alice@example.com", []string{"bob@example.org"}, richMsg, "4FRZ1")
	if act.Code != gomilter.ActDiscard || len(mods) != 0 {
		t.Fatalf("end: %q %+v, want discard", act.Code, mods)
	}
	frozen, _ := env.q.snapshot()
	if len(frozen) != 1 {
		t.Fatalf("%d frozen", len(frozen))
	}
	got, want := frozen[0].data, richMsg.want()
	if !bytes.Equal(got, want) {
		t.Fatalf("frozen message differs:\n got %q\nwant %q", trunc(got), trunc(want))
	}
	r := frozen[0].msg.Request
	if r.Size != int64(len(want)) || r.QueueID != "4FRZ1" || r.RecipientCount != 1 || r.Recipient != "bob@example.org" ||
		r.ProtocolState != policy.StateEndOfMessage {
		t.Errorf("request: %+v", r)
	}
}

func trunc(b []byte) []byte {
	if len(b) > 600 {
		return append(append(bytes.Clone(b[:300]), "..."...), b[len(b)-300:]...)
	}
	return b
}

// TestFreezeFailure: when Freeze fails, or cannot be attempted, the reply is
// a temporary failure, never discard.
func TestFreezeFailure(t *testing.T) {
	freeze := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Freeze}
		}
		return policy.Decision{}
	}}
	for _, tc := range []struct {
		name string
		srv  *Server
		code int
		text string
	}{
		{"freeze-error", &Server{Decider: freeze, Quarantine: &fakeQuarantine{freezeErr: errors.New("bolt: fsync: I/O error")}}, 451, "4.3.0 " + textFreezeFault},
		{"too-large", &Server{Decider: freeze, MaxMessageSize: 100}, 452, "4.3.4 " + textTooLarge},
		{"no-quarantine", &Server{Decider: freeze}, 451, "4.3.0 " + textFreezeFault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startWith(t, "tcp", tc.srv, tc.name != "no-quarantine")
			s := env.session(t)
			connect(t, s)
			_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, richMsg, "Q1")
			if act.Code != gomilter.ActReplyCode || act.SMTPCode != tc.code || act.SMTPText != tc.text || len(mods) != 0 {
				t.Fatalf("end: %q %d %q %+v; want %d %q", act.Code, act.SMTPCode, act.SMTPText, mods, tc.code, tc.text)
			}
			if env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultFreeze] }) != 1 {
				t.Error("freeze fault not counted")
			}
			// Size is counted in full even when the buffer was dropped.
			if eom := env.dec.eom(); eom[0].Size != int64(len(richMsg.want())) {
				t.Errorf("size %d, want %d", eom[0].Size, len(richMsg.want()))
			}
		})
	}
}

// TestAbortResets: a RCPT-stage freeze does not leak into the next message
// after an abort (RSET).
func TestAbortResets(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.Recipient == "spam@example.org" {
			return policy.Decision{Action: policy.Freeze}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	cont(t, "mail")(s.Mail("a@example.com", nil))
	cont(t, "rcpt")(s.Rcpt("spam@example.org", nil))
	if err := s.Abort(); err != nil {
		t.Fatal(err)
	}
	_, _, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q2")
	if act.Code != gomilter.ActAccept {
		t.Fatalf("after abort: %q, want accept", act.Code)
	}
	eom := env.dec.eom()
	if len(eom) != 1 || eom[0].RecipientCount != 1 || eom[0].Instance == "" {
		t.Fatalf("EOM: %+v", eom)
	}
	if reqs := env.dec.requests(); reqs[0].Instance == eom[0].Instance {
		t.Error("aborted and new message share an instance")
	}
}

// TestDeciderPanic: a Decide that panics gets the command temp-failed and
// the connection closed; the server keeps serving.
func TestDeciderPanic(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.Recipient == "boom@example.org" {
			panic("decider bug")
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	cont(t, "mail")(s.Mail("a@example.com", nil))
	act, err := s.Rcpt("boom@example.org", nil)
	if err != nil {
		t.Fatal(err)
	}
	if act.Code != gomilter.ActReplyCode || act.SMTPCode != 451 || !strings.HasPrefix(act.SMTPText, "4.3.0 ") {
		t.Fatalf("rcpt after panic: %q %d %q, want 451 4.3.0", act.Code, act.SMTPCode, act.SMTPText)
	}
	// The connection is closed after the reply.
	if _, err := s.Rcpt("bob@example.org", nil); err == nil {
		t.Error("connection still open after a panic")
	}
	if env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultPanic] }) != 1 {
		t.Error("panic not counted")
	}

	// Panic at end of message: temp-fail.
	s2 := env.session(t)
	connect(t, s2)
	dec.mu.Lock()
	dec.rule = func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			panic(errors.New("eom bug"))
		}
		return policy.Decision{}
	}
	dec.mu.Unlock()
	_, _, act = transaction(t, s2, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActReplyCode || act.SMTPCode != 451 {
		t.Fatalf("eom after panic: %q %d %q", act.Code, act.SMTPCode, act.SMTPText)
	}

	// Still serving.
	dec.mu.Lock()
	dec.rule = nil
	dec.mu.Unlock()
	s3 := env.session(t)
	connect(t, s3)
	_, _, act = transaction(t, s3, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q2")
	if act.Code != gomilter.ActAccept {
		t.Fatalf("new connection: %q", act.Code)
	}
}

// TestDecisionFault: a fail-open Pass with Fault set is applied and counted.
func TestDecisionFault(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		return policy.Decision{Fault: errors.New("store down")}
	}}
	env := start(t, "tcp", &Server{Decider: dec})
	s := env.session(t)
	connect(t, s)
	_, _, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActAccept {
		t.Fatalf("end: %q", act.Code)
	}
	if n := env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultDecision] }); n != 2 {
		t.Errorf("decision faults %d, want 2", n)
	}
}

// TestIdleTimeout: a connection that sends nothing, before or after the
// option negotiation, is closed after ReadTimeout.
func TestIdleTimeout(t *testing.T) {
	env := start(t, "tcp", &Server{ReadTimeout: 150 * time.Millisecond})
	c := env.rawConn(t)
	start := time.Now()
	readsEOF(t, c)
	if el := time.Since(start); el < 100*time.Millisecond || el > 3*time.Second {
		t.Errorf("closed after %v, want about 150ms", el)
	}

	s := env.session(t)
	connect(t, s)
	time.Sleep(400 * time.Millisecond)
	if _, err := s.Mail("a@example.com", nil); err == nil {
		t.Error("idle session still open after ReadTimeout")
	}

	// A packet that stops half-way is cut off too (deadline per read).
	c = env.rawConn(t)
	if _, err := c.Write([]byte{0, 0, 0, 10, 'B', 'x'}); err != nil {
		t.Fatal(err)
	}
	readsEOF(t, c)
	waitFor(t, "timeouts counted", func() bool {
		return env.metrics.get(func(m *countMetrics) int { return m.bad[ReasonTimeout] }) == 3
	})
}

// TestAllowList: TCP clients outside AllowedNetworks (default: loopback)
// are closed unread.
func TestAllowList(t *testing.T) {
	env := start(t, "tcp", &Server{AllowedNetworks: nil})
	s := env.session(t) // 127.0.0.1: allowed
	connect(t, s)

	env2 := start(t, "tcp", &Server{AllowedNetworks: mustPrefixes(t, "192.0.2.0/24")})
	c := env2.rawConn(t)
	readsEOF(t, c)
	if n := len(env2.dec.requests()); n != 0 {
		t.Errorf("Decide called %d times for a refused connection", n)
	}
}

// TestShutdownDrains: Shutdown closes connections between messages at
// once, lets a message in progress finish, then returns; new connections
// are refused.
func TestShutdownDrains(t *testing.T) {
	env := start(t, "tcp", &Server{})
	idle := env.session(t)
	connect(t, idle)
	busy := env.session(t)
	connect(t, busy)
	cont(t, "mail")(busy.Mail("a@example.com", nil))
	cont(t, "rcpt")(busy.Rcpt("bob@example.org", nil))

	done := make(chan error, 1)
	go func() { done <- env.srv.Shutdown(context.Background()) }()

	// The idle connection is closed.
	waitFor(t, "idle connection closed", func() bool {
		return env.srv.ConnStats().Open == 1
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned %v with a message in progress", err)
	case <-time.After(100 * time.Millisecond):
	}
	select {
	case err := <-env.served:
		if !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		env.served <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return on Shutdown")
	}

	// The busy one finishes its message.
	for _, h := range simpleMsg.headers {
		cont(t, "header")(busy.HeaderField(h[0], h[1]))
	}
	cont(t, "eoh")(busy.HeaderEnd())
	mods, act, err := busy.End()
	if err != nil || act.Code != gomilter.ActAccept || len(mods) != 0 {
		t.Fatalf("end during shutdown: %v %v %v", mods, act, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after the last message")
	}
	if _, err := busy.Mail("a@example.com", nil); err == nil {
		t.Error("connection still open after Shutdown")
	}
	if err := env.srv.Shutdown(context.Background()); !errors.Is(err, ErrServerClosed) {
		t.Errorf("second Shutdown: %v", err)
	}
}

// TestShutdownTimeout: Shutdown gives up when ctx ends; Close cancels the
// quarantine call still running.
func TestShutdownTimeout(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Freeze}
		}
		return policy.Decision{}
	}}
	q := &fakeQuarantine{freezeGate: make(chan struct{})}
	env := start(t, "tcp", &Server{Decider: dec, Quarantine: q})
	s := env.session(t)
	connect(t, s)
	ended := make(chan *gomilter.Action, 1)
	go func() {
		cont(t, "mail")(s.Mail("a@example.com", nil))
		cont(t, "rcpt")(s.Rcpt("bob@example.org", nil))
		cont(t, "eoh")(s.HeaderEnd())
		_, act, _ := s.End()
		ended <- act
	}()
	waitFor(t, "decision", func() bool { return len(env.dec.eom()) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := env.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want deadline exceeded", err)
	}
	env.srv.Close()
	close(q.freezeGate)
	if act := <-ended; act != nil && act.Code == gomilter.ActDiscard {
		t.Error("discard after Close")
	}
}

func TestServeErrors(t *testing.T) {
	var srv Server
	l := newListener(t)
	if err := srv.Serve(l); !errors.Is(err, ErrNoDecider) {
		t.Errorf("Serve without Decider: %v", err)
	}
	srv.Decider = &fakeDecider{}
	if err := srv.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := srv.Serve(newListener(t)); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
	if err := srv.Close(); !errors.Is(err, ErrServerClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// panicQuarantine panics in Freeze.
type panicQuarantine struct{ fakeQuarantine }

func (*panicQuarantine) Freeze(context.Context, *Message, policy.Decision) (string, error) {
	panic("quarantine bug")
}

// TestFreezePanic: a panic while freezing temp-fails the message; it is
// never discarded.
func TestFreezePanic(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		return policy.Decision{Action: policy.Freeze}
	}}
	env := start(t, "tcp", &Server{Decider: dec, Quarantine: &panicQuarantine{}})
	s := env.session(t)
	connect(t, s)
	_, mods, act := transaction(t, s, "a@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
	if act.Code != gomilter.ActReplyCode || act.SMTPCode != 451 || len(mods) != 0 {
		t.Fatalf("end: %q %d %q %+v, want 451", act.Code, act.SMTPCode, act.SMTPText, mods)
	}
	if env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultPanic] }) != 1 {
		t.Error("panic not counted")
	}
}
