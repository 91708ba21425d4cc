package milter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/policy"
)

// fakeDecider answers with rule (Pass if nil) and records every request.
type fakeDecider struct {
	mu   sync.Mutex
	rule func(req *policy.Request) policy.Decision
	reqs []policy.Request
}

func (f *fakeDecider) Decide(_ context.Context, req *policy.Request) policy.Decision {
	f.mu.Lock()
	f.reqs = append(f.reqs, *req)
	rule := f.rule
	f.mu.Unlock()
	if rule == nil {
		return policy.Decision{}
	}
	return rule(req)
}

func (f *fakeDecider) requests() []policy.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]policy.Request(nil), f.reqs...)
}

// eom returns the END-OF-MESSAGE requests.
func (f *fakeDecider) eom() []policy.Request {
	var out []policy.Request
	for _, r := range f.requests() {
		if r.ProtocolState == policy.StateEndOfMessage {
			out = append(out, r)
		}
	}
	return out
}

// fakeQuarantine records Freeze and Hold calls; err, if set, fails them.
type fakeQuarantine struct {
	mu        sync.Mutex
	freezeErr error
	holdErr   error
	frozen    []quarantined
	held      []quarantined
	// freezeGate, if set, is waited on inside Freeze.
	freezeGate chan struct{}
}

type quarantined struct {
	msg  Message
	d    policy.Decision
	data []byte // what Freeze read from msg.Body
}

func (q *fakeQuarantine) Freeze(_ context.Context, m *Message, d policy.Decision) (string, error) {
	if q.freezeGate != nil {
		<-q.freezeGate
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.freezeErr != nil {
		return "", q.freezeErr
	}
	data, err := io.ReadAll(m.Body)
	if err != nil {
		return "", err
	}
	if int64(len(data)) != m.Size {
		return "", fmt.Errorf("read %d bytes of a %d-byte message", len(data), m.Size)
	}
	cp := *m
	cp.Body = nil
	q.frozen = append(q.frozen, quarantined{cp, d, data})
	return "f1", nil
}

// Hold defers the message when holdErr is set, as the daemon does.
func (q *fakeQuarantine) Hold(_ context.Context, m *Message, d policy.Decision) policy.Decision {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.holdErr != nil {
		return policy.Decision{Action: policy.Defer, Code: 450, Enhanced: "4.7.1", Text: "Message cannot be held now"}
	}
	q.held = append(q.held, quarantined{msg: *m, d: d})
	return d
}

func (q *fakeQuarantine) snapshot() (frozen, held []quarantined) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]quarantined(nil), q.frozen...), append([]quarantined(nil), q.held...)
}

// countMetrics counts what the Server reports.
type countMetrics struct {
	mu        sync.Mutex
	decisions map[string]int // state/action
	bad       map[string]int
	faults    map[string]int
}

func newCountMetrics() *countMetrics {
	return &countMetrics{
		decisions: map[string]int{},
		bad:       map[string]int{},
		faults:    map[string]int{},
	}
}

func (m *countMetrics) Decision(state string, a policy.Action, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.decisions[state+"/"+a.String()]++
}

func (m *countMetrics) BadInput(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bad[reason]++
}

func (m *countMetrics) Fault(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults[kind]++
}

func (m *countMetrics) get(f func(m *countMetrics) int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f(m)
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testLogger logs through t until the test's cleanup stops it (session
// goroutines may outlive the test by a moment).
func testLogger(t *testing.T) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

// testEnv is a running Server with fakes.
type testEnv struct {
	srv     *Server
	dec     *fakeDecider
	q       *fakeQuarantine
	metrics *countMetrics
	network string
	addr    string
	served  chan error
}

// start runs srv (its Decider, Quarantine and Metrics filled in with fakes
// when nil) on network "tcp" (127.0.0.1:0) or "unix" (a socket in a temp
// dir) and closes it at cleanup.
func start(t *testing.T, network string, srv *Server) *testEnv {
	t.Helper()
	return startWith(t, network, srv, true)
}

// startWith is start; with fillQuarantine false a nil Quarantine stays nil.
func startWith(t *testing.T, network string, srv *Server, fillQuarantine bool) *testEnv {
	t.Helper()
	env := &testEnv{srv: srv, network: network, served: make(chan error, 1)}
	if srv.Decider == nil {
		env.dec = &fakeDecider{}
		srv.Decider = env.dec
	} else if d, ok := srv.Decider.(*fakeDecider); ok {
		env.dec = d
	}
	if srv.Quarantine == nil && fillQuarantine {
		env.q = &fakeQuarantine{}
		srv.Quarantine = env.q
	} else if q, ok := srv.Quarantine.(*fakeQuarantine); ok {
		env.q = q
	}
	if srv.Metrics == nil {
		env.metrics = newCountMetrics()
		srv.Metrics = env.metrics
	}
	if srv.Logger == nil {
		srv.Logger = testLogger(t)
	}
	var l net.Listener
	var err error
	switch network {
	case "tcp":
		l, err = net.Listen("tcp", "127.0.0.1:0")
	case "unix":
		l, err = net.Listen("unix", filepath.Join(t.TempDir(), "milter.sock"))
	}
	if err != nil {
		t.Fatal(err)
	}
	env.addr = l.Addr().String()
	go func() { env.served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-env.served:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
		waitFor(t, "sessions to end", func() bool { return srv.ConnStats().Open == 0 })
	})
	return env
}

// clientActions are the actions the test MTA offers, as Postfix does.
const clientActions = gomilter.OptAddHeader | gomilter.OptQuarantine

// session opens a milter session with the real go-milter client, as an MTA.
func (env *testEnv) session(t *testing.T) *gomilter.ClientSession {
	t.Helper()
	return env.sessionWith(t, clientActions)
}

func (env *testEnv) sessionWith(t *testing.T, actions gomilter.OptAction) *gomilter.ClientSession {
	t.Helper()
	c := gomilter.NewClientWithOptions(env.network, env.addr, gomilter.ClientOptions{
		Dialer:       &net.Dialer{Timeout: 5 * time.Second},
		ReadTimeout:  5 * time.Second,
		WriteTimeout: 5 * time.Second,
		ActionMask:   actions,
	})
	s, err := c.Session()
	if err != nil {
		t.Fatalf("session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// mustAct fails unless err is nil and act has code want.
func mustAct(t *testing.T, what string, act *gomilter.Action, err error, want gomilter.ActionCode) *gomilter.Action {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if act.Code != want {
		t.Fatalf("%s: action %q (%d %q), want %q", what, act.Code, act.SMTPCode, act.SMTPText, want)
	}
	return act
}

// testMsg is a message as a client sends it, with the bytes the server must
// reconstruct.
type testMsg struct {
	headers [][2]string // name, value as sent in SMFIC_HEADER
	body    [][]byte    // SMFIC_BODY chunks
}

// want is the message as the MTA would deliver it.
func (m testMsg) want() []byte {
	var b bytes.Buffer
	for _, h := range m.headers {
		b.WriteString(h[0] + ": ")
		b.Write(bytes.ReplaceAll([]byte(h[1]), []byte("\n"), []byte("\r\n")))
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	for _, c := range m.body {
		b.Write(c)
	}
	return b.Bytes()
}

var simpleMsg = testMsg{
	headers: [][2]string{
		{"From", "Alice <alice@example.com>"},
		{"To", "bob@example.org"},
		{"Subject", "hello"},
	},
	body: [][]byte{[]byte("Hi Bob.\r\n")},
}

// transaction drives one message through an open session: MAIL (with the
// Postfix default MAIL macros), the recipients, header and body, and end of
// message with {i}. It returns the RCPT actions and the end-of-message
// result; a recipient that is refused is not an error.
func transaction(t *testing.T, s *gomilter.ClientSession, sender string, rcpts []string, msg testMsg, queueID string) ([]*gomilter.Action, []gomilter.ModifyAction, *gomilter.Action) {
	t.Helper()
	if err := s.Macros(gomilter.CodeMail, "{auth_type}", "PLAIN", "{auth_authen}", "alice", "{mail_addr}", sender); err != nil {
		t.Fatal(err)
	}
	cont(t, "mail")(s.Mail(sender, nil))
	var acts []*gomilter.Action
	accepted := 0
	for _, r := range rcpts {
		if err := s.Macros(gomilter.CodeRcpt, "{rcpt_addr}", r); err != nil {
			t.Fatal(err)
		}
		act, err := s.Rcpt(r, nil)
		if err != nil {
			t.Fatalf("rcpt %s: %v", r, err)
		}
		acts = append(acts, act)
		if act.Code == gomilter.ActContinue {
			accepted++
		}
	}
	if accepted == 0 {
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		return acts, nil, nil
	}
	for _, h := range msg.headers {
		cont(t, "header")(s.HeaderField(h[0], h[1]))
	}
	cont(t, "eoh")(s.HeaderEnd())
	for _, c := range msg.body {
		cont(t, "body")(s.BodyChunk(c))
	}
	if err := s.Macros(gomilter.CodeEOB, "i", queueID); err != nil {
		t.Fatal(err)
	}
	mods, act, err := s.End()
	if err != nil {
		t.Fatalf("end: %v", err)
	}
	return acts, mods, act
}

// cont returns a check that a client call answered continue:
// cont(t, "mail")(s.Mail(...)).
func cont(t *testing.T, what string) func(*gomilter.Action, error) {
	return func(act *gomilter.Action, err error) {
		t.Helper()
		mustAct(t, what, act, err, gomilter.ActContinue)
	}
}

// connect sends the connect and HELO events as Postfix does.
func connect(t *testing.T, s *gomilter.ClientSession) {
	t.Helper()
	if err := s.Macros(gomilter.CodeConn, "j", "mx.example.net", "{daemon_name}", "smtpd"); err != nil {
		t.Fatal(err)
	}
	cont(t, "conn")(s.Conn("client.example.com", gomilter.FamilyInet, 41000, "192.0.2.7"))
	cont(t, "helo")(s.Helo("client.example.com"))
}

// rawConn dials the server without the milter client.
func (env *testEnv) rawConn(t *testing.T) net.Conn {
	t.Helper()
	c, err := net.DialTimeout(env.network, env.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readsEOF reports whether the server closes c within 5 s without sending
// anything.
func readsEOF(t *testing.T, c net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read: %v (want EOF)", err)
	}
	if len(n) != 0 {
		t.Fatalf("server sent %q before closing", n)
	}
}
