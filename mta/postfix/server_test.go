package postfix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// syncBuffer is a log sink safe for concurrent writes (mtatest.SyncBuffer).
type syncBuffer = mtatest.SyncBuffer

// testMetrics records a Server's counts.
type testMetrics struct {
	mta.NoMetrics
	mu               sync.Mutex
	requests         map[policy.Action]int
	badInput, faults map[string]int
}

func newTestMetrics() *testMetrics {
	return &testMetrics{requests: map[policy.Action]int{}, badInput: map[string]int{}, faults: map[string]int{}}
}

func (m *testMetrics) Decision(_ string, a policy.Action, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[a]++
}

func (m *testMetrics) BadInput(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.badInput[reason]++
}

func (m *testMetrics) Fault(kind string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faults[kind]++
}

func (m *testMetrics) get(f func(m *testMetrics) int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return f(m)
}

// testDecider defers "bob", panics for "boom", faults for "fault" and
// passes everyone else.
var testDecider = mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
	switch req.SASLUsername {
	case "bob":
		return policy.Decision{Action: policy.Defer, Text: "Rate limit exceeded for bob", Reason: "test", Limit: "hourly", Key: "bob"}
	case "boom":
		panic("decider exploded")
	case "fault":
		return policy.Decision{Fault: errors.New("store unreachable"), Reason: "fail open"}
	}
	return policy.Decision{}
})

type testServer struct {
	*Server
	addr    string // dial address
	network string
	log     *syncBuffer
	metrics *testMetrics
	served  chan error
}

// startServer serves srv on l (a TCP listener on 127.0.0.1:0 if nil),
// filling in a test logger, metrics and testDecider where unset.
func startServer(t *testing.T, srv *Server, l net.Listener) *testServer {
	t.Helper()
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	ts := &testServer{Server: srv, addr: l.Addr().String(), network: l.Addr().Network(),
		log: &syncBuffer{}, metrics: newTestMetrics(), served: make(chan error, 1)}
	if srv.Decider == nil {
		srv.Decider = testDecider
	}
	if srv.Logger == nil {
		srv.Logger = slog.New(slog.NewJSONHandler(ts.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if srv.Metrics == nil {
		srv.Metrics = ts.metrics
	}
	go func() { ts.served <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		select {
		case err := <-ts.served:
			if !errors.Is(err, ErrServerClosed) {
				t.Errorf("Serve returned %v, want ErrServerClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", ts.log)
		}
	})
	return ts
}

func (ts *testServer) dial(t *testing.T) *client {
	t.Helper()
	c, err := net.Dial(ts.network, ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &client{Conn: c, br: bufio.NewReader(c)}
}

type client struct {
	net.Conn
	br *bufio.Reader
}

// ask sends one request and returns the reply line without terminators.
func (c *client) ask(t *testing.T, req []byte) string {
	t.Helper()
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	line, err := c.br.ReadString('\n')
	if err != nil {
		t.Fatalf("reading reply: %v", err)
	}
	if empty, err := c.br.ReadString('\n'); err != nil || empty != "\n" {
		t.Fatalf("reply %q not followed by an empty line: %q, %v", line, empty, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// expectClosedSilently asserts that the server closes the connection
// without writing anything.
func (c *client) expectClosedSilently(t *testing.T) {
	t.Helper()
	b, err := io.ReadAll(c.br)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("want the connection closed, got %v", err)
	}
	if len(b) != 0 {
		t.Fatalf("want no reply, got %q", b)
	}
}

func request(user string) []byte {
	return encodeRequest(&policy.Request{ProtocolState: policy.StateRcpt, ProtocolName: "ESMTP",
		Sender: user + "@example.org", Recipient: "rcpt@example.net", ClientAddress: "192.0.2.1",
		SASLUsername: user, Instance: "1.2.3"})
}

func TestServerPersistentConnection(t *testing.T) {
	ts := startServer(t, &Server{}, nil)
	c := ts.dial(t)
	rcpt, eom := transcript(t, "rcpt.txt"), transcript(t, "eom.txt")
	for i := range 200 {
		switch i % 4 {
		case 0:
			if got := c.ask(t, rcpt); got != "action=DUNNO" {
				t.Fatalf("request %d: %q", i, got)
			}
		case 1:
			if got := c.ask(t, eom); got != "action=DUNNO" {
				t.Fatalf("request %d: %q", i, got)
			}
		case 2:
			if got := c.ask(t, request("bob")); got != "action=450 4.7.1 Rate limit exceeded for bob" {
				t.Fatalf("request %d: %q", i, got)
			}
		case 3:
			if got := c.ask(t, request("fault")); got != "action=DUNNO" {
				t.Fatalf("request %d: %q", i, got)
			}
		}
	}
	// Pipelined: three requests in one write, three replies in order.
	batch := bytes.Join([][]byte{request("bob"), rcpt, request("bob")}, nil)
	if _, err := c.Write(batch); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadFull(c.br, make([]byte, len("action=450 4.7.1 Rate limit exceeded for bob\n\naction=DUNNO\n\n")+len("action=450 4.7.1 Rate limit exceeded for bob\n\n")))
	if err != nil {
		t.Fatal(got, err)
	}
	c.Close()

	m := ts.metrics
	waitFor(t, func() bool { return ts.ConnStats().Open == 0 })
	if n := m.get(func(m *testMetrics) int { return m.requests[policy.Defer] }); n != 52 {
		t.Errorf("counted %d defers, want 52", n)
	}
	if n := m.get(func(m *testMetrics) int { return m.faults[mta.FaultDecision] }); n != 50 {
		t.Errorf("counted %d decision faults, want 50", n)
	}

	// Every log line carries the connection id.
	checkLogConnIDs(t, ts.log.String(), 50+52)
}

// checkLogConnIDs asserts that every line of the JSON log has a conn
// attribute, and that at least minDecisions Info lines log a decision.
func checkLogConnIDs(t *testing.T, log string, minDecisions int) {
	t.Helper()
	decisions := 0
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if _, ok := rec["conn"]; !ok {
			t.Errorf("log line without conn id: %s", line)
		}
		if rec["level"] != "DEBUG" {
			decisions++
		}
	}
	if decisions < minDecisions {
		t.Errorf("%d Info/Warn log lines, want at least %d", decisions, minDecisions)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestServerConcurrentConnections(t *testing.T) {
	ts := startServer(t, &Server{}, nil)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			c := ts.dial(t)
			for j := range 50 {
				user, want := "alice", "action=DUNNO"
				if (i+j)%3 == 0 {
					user, want = "bob", "action=450 4.7.1 Rate limit exceeded for bob"
				}
				if got := c.ask(t, request(user)); got != want {
					t.Errorf("conn %d request %d: %q, want %q", i, j, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestServerBadInput(t *testing.T) {
	for _, tc := range []struct {
		name, reason string
		in           string
		writeErrOK   bool
	}{
		{"no equals", ReasonMalformed, "request=smtpd_access_policy\ngarbage\n\n", false},
		{"empty request", ReasonMalformed, "\n", false},
		{"NUL", ReasonMalformed, "request=smtpd_access_policy\nsender=a\x00\n\n", false},
		{"bad size", ReasonMalformed, "request=smtpd_access_policy\nsize=big\n\n", false},
		{"unknown request", ReasonUnknownRequest, "request=junk\n\n", false},
		{"missing request", ReasonUnknownRequest, "sender=a@b\n\n", false},
		{"line too long", ReasonLineTooLong, "request=smtpd_access_policy\nsender=" + strings.Repeat("a", MaxLineLen) + "\n\n", true},
		{"too many attributes", ReasonTooManyAttributes, "request=smtpd_access_policy\n" + strings.Repeat("a=b\n", MaxAttributes) + "\n", true},
		{"EOF inside a line", ReasonUnexpectedEOF, "request=smtpd_access_policy\nsender=a", false},
		{"HTTP", ReasonMalformed, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, &Server{}, nil)
			// A connection opened before the bad one keeps working.
			other := ts.dial(t)
			if got := other.ask(t, request("bob")); !strings.HasPrefix(got, "action=450 ") {
				t.Fatalf("before: %q", got)
			}

			c := ts.dial(t)
			writeDone := make(chan error, 1)
			go func() {
				_, err := c.Write([]byte(tc.in))
				if err == nil && tc.reason == ReasonUnexpectedEOF {
					err = c.Conn.(*net.TCPConn).CloseWrite()
				}
				writeDone <- err
			}()
			c.expectClosedSilently(t)
			if err := <-writeDone; err != nil && !tc.writeErrOK {
				t.Fatalf("write: %v", err)
			}
			waitFor(t, func() bool { return ts.metrics.get(func(m *testMetrics) int { return m.badInput[tc.reason] }) == 1 })

			if got := other.ask(t, request("alice")); got != "action=DUNNO" {
				t.Fatalf("other connection after bad input: %q", got)
			}
			if got := ts.dial(t).ask(t, request("bob")); !strings.HasPrefix(got, "action=450 ") {
				t.Fatalf("new connection after bad input: %q", got)
			}
			if log := ts.log.String(); !strings.Contains(log, `"reason":"`+tc.reason+`"`) {
				t.Errorf("bad input not logged with its reason:\n%s", log)
			}
		})
	}
}

func TestServerRequestTimeout(t *testing.T) {
	ts := startServer(t, &Server{RequestTimeout: 100 * time.Millisecond}, nil)
	c := ts.dial(t)
	if _, err := c.Write([]byte("request=smtpd_access_policy\nsender=a@b\n")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.expectClosedSilently(t)
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %v", d)
	}
	waitFor(t, func() bool { return ts.metrics.get(func(m *testMetrics) int { return m.badInput[ReasonTimeout] }) == 1 })
}

func TestServerIdleTimeout(t *testing.T) {
	ts := startServer(t, &Server{IdleTimeout: 100 * time.Millisecond}, nil)
	c := ts.dial(t)
	if got := c.ask(t, request("alice")); got != "action=DUNNO" {
		t.Fatal(got)
	}
	start := time.Now()
	c.expectClosedSilently(t)
	if d := time.Since(start); d < 50*time.Millisecond || d > 3*time.Second {
		t.Fatalf("idle connection closed after %v, want about 100ms", d)
	}
	// Idle closes are not bad input.
	if n := ts.metrics.get(func(m *testMetrics) int { return len(m.badInput) }); n != 0 {
		t.Fatalf("idle timeout counted as bad input: %v", ts.metrics.badInput)
	}
}

func TestServerPanicFailsOpen(t *testing.T) {
	ts := startServer(t, &Server{}, nil)
	c := ts.dial(t)
	for i := range 3 {
		if got := c.ask(t, request("boom")); got != "action=DUNNO" {
			t.Fatalf("panic %d: %q", i, got)
		}
		if got := c.ask(t, request("bob")); !strings.HasPrefix(got, "action=450 ") {
			t.Fatalf("after panic %d: %q", i, got)
		}
	}
	if n := ts.metrics.get(func(m *testMetrics) int { return m.faults[mta.FaultPanic] }); n != 3 {
		t.Fatalf("counted %d panics, want 3", n)
	}
	if log := ts.log.String(); !strings.Contains(log, "decider exploded") {
		t.Fatalf("panic not logged:\n%s", log)
	}
}

// TestServerEximReadsocket plays Exim's ${readsocket{inet:...}}: write the
// request, shut down the write side, read the reply until EOF.
func TestServerEximReadsocket(t *testing.T) {
	ts := startServer(t, &Server{}, nil)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"transcript without empty line", transcript(t, "exim-readsocket.txt"), "action=DUNNO\n\n"},
		{"with empty line", request("bob"), "action=450 4.7.1 Rate limit exceeded for bob\n\n"},
		{"LF without empty line", []byte("request=smtpd_access_policy\nsasl_username=bob\n"), "action=450 4.7.1 Rate limit exceeded for bob\n\n"},
		{"partial last line", []byte("request=smtpd_access_policy\nsasl_username=bob"), ""},
		{"nothing", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ts.dial(t)
			if _, err := c.Write(tc.in); err != nil {
				t.Fatal(err)
			}
			if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestServerAllowList(t *testing.T) {
	var calls atomic.Int32
	decider := mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
		calls.Add(1)
		return policy.Decision{}
	})
	ts := startServer(t, &Server{Decider: decider,
		AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32")}}, nil)
	c := ts.dial(t)
	c.Write(request("alice")) // may fail: the server closes unread
	c.expectClosedSilently(t)
	if n := calls.Load(); n != 0 {
		t.Fatalf("Decide called %d times for a refused connection", n)
	}
	waitFor(t, func() bool { return strings.Contains(ts.log.String(), "refused by allow-list") })
	if log := ts.log.String(); !strings.Contains(log, `"conn":1`) {
		t.Fatalf("refusal not logged with conn id:\n%s", log)
	}

	// An allow-list that includes the client admits it.
	ts2 := startServer(t, &Server{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, nil)
	if got := ts2.dial(t).ask(t, request("alice")); got != "action=DUNNO" {
		t.Fatal(got)
	}
}

func TestServerUnixSocket(t *testing.T) {
	g, err := user.LookupGroupId(strconv.Itoa(os.Getgid()))
	if err != nil {
		t.Skip("no group name for the current gid:", err)
	}
	path := filepath.Join(t.TempDir(), "policy")
	l, err := srvconn.ListenUnixGroup(path, 0o600, g.Name)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want socket 0600", fi.Mode())
	}
	if gid := fi.Sys().(*syscall.Stat_t).Gid; int(gid) != os.Getgid() {
		t.Fatalf("socket gid %d, want %d", gid, os.Getgid())
	}

	ts := startServer(t, &Server{}, l)
	c := ts.dial(t)
	for range 10 {
		if got := c.ask(t, transcript(t, "rcpt.txt")); got != "action=DUNNO" {
			t.Fatal(got)
		}
		if got := c.ask(t, request("bob")); !strings.HasPrefix(got, "action=450 ") {
			t.Fatal(got)
		}
	}
	// A live socket is not taken over.
	if _, err := srvconn.ListenUnixGroup(path, 0o660, ""); !errors.Is(err, srvconn.ErrSocketInUse) {
		t.Fatalf("second ListenUnix: %v, want ErrSocketInUse", err)
	}
	ts.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket not removed on close: %v", err)
	}
}

func TestListenUnixStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy")
	// A socket left behind by a crashed daemon.
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatal(err)
	}
	l2, err := srvconn.ListenUnixGroup(path, 0o660, "")
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o660 {
		t.Errorf("mode %v, want %v", fi.Mode().Perm(), os.FileMode(0o660))
	}
	l2.Close()

	// A regular file is never removed.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := srvconn.ListenUnixGroup(file, 0o660, ""); !errors.Is(err, srvconn.ErrNotSocket) {
		t.Fatalf("ListenUnix on a file: %v, want ErrNotSocket", err)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("file removed: %v", err)
	}

	// An unknown group fails and leaves no socket.
	if _, err := srvconn.ListenUnixGroup(path, 0o660, "no-such-group-ratelimitd"); err == nil {
		t.Fatal("ListenUnix with an unknown group succeeded")
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

// slowDecider blocks requests from "slow" until released.
type slowDecider struct {
	started chan struct{}
	release chan struct{}
	ctxErr  chan error
}

func newSlowDecider() *slowDecider {
	return &slowDecider{started: make(chan struct{}, 10), release: make(chan struct{}), ctxErr: make(chan error, 10)}
}

func (d *slowDecider) Decide(ctx context.Context, req *policy.Request) policy.Decision {
	if req.SASLUsername != "slow" {
		return testDecider(ctx, req)
	}
	d.started <- struct{}{}
	select {
	case <-d.release:
		return policy.Decision{Action: policy.Defer, Text: "slow answer"}
	case <-ctx.Done():
		d.ctxErr <- ctx.Err()
		return policy.Decision{Fault: ctx.Err()}
	}
}

func TestServerShutdownDrains(t *testing.T) {
	sd := newSlowDecider()
	ts := startServer(t, &Server{Decider: sd}, nil)

	busy := ts.dial(t)
	if _, err := busy.Write(request("slow")); err != nil {
		t.Fatal(err)
	}
	<-sd.started
	idle := ts.dial(t)
	if got := idle.ask(t, request("alice")); got != "action=DUNNO" {
		t.Fatal(got)
	}

	shutdown := make(chan error, 1)
	go func() { shutdown <- ts.Shutdown(context.Background()) }()

	// The listener closes and Serve returns; the idle connection is
	// closed without a reply.
	select {
	case err := <-ts.served:
		if !errors.Is(err, ErrServerClosed) {
			t.Fatalf("Serve: %v", err)
		}
		ts.served <- err // for the cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return on Shutdown")
	}
	if c, err := net.Dial("tcp", ts.addr); err == nil {
		c.Close()
		t.Fatal("dial succeeded after Shutdown")
	}
	idle.expectClosedSilently(t)

	// Shutdown waits for the in-flight request.
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(sd.release)
	line, err := busy.br.ReadString('\n')
	if err != nil || line != "action=450 4.7.1 slow answer\n" {
		t.Fatalf("in-flight reply: %q, %v", line, err)
	}
	if rest, err := io.ReadAll(busy.br); err != nil || string(rest) != "\n" {
		t.Fatalf("after the in-flight reply: %q, %v (want the empty line, then close)", rest, err)
	}
	select {
	case err := <-shutdown:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if err := ts.Shutdown(context.Background()); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("second Shutdown: %v", err)
	}
	if err := ts.Serve(mustListen(t)); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("Serve after Shutdown: %v", err)
	}
}

func TestServerShutdownTimeoutThenClose(t *testing.T) {
	sd := newSlowDecider()
	ts := startServer(t, &Server{Decider: sd}, nil)
	busy := ts.dial(t)
	if _, err := busy.Write(request("slow")); err != nil {
		t.Fatal(err)
	}
	<-sd.started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := ts.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown: %v, want DeadlineExceeded", err)
	}
	if err := ts.Close(); err != nil {
		t.Fatalf("Close after Shutdown: %v", err)
	}
	if err := <-sd.ctxErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("Decide ctx: %v, want Canceled", err)
	}
	busy.expectClosedSilently(t)
	if err := ts.Close(); !errors.Is(err, ErrServerClosed) {
		t.Fatalf("second Close: %v", err)
	}
}

func TestServerDecideDeadline(t *testing.T) {
	sd := newSlowDecider()
	ts := startServer(t, &Server{Decider: sd, RequestTimeout: 100 * time.Millisecond}, nil)
	c := ts.dial(t)
	// Decide honours its deadline and fails open; the reply still goes out.
	if got := c.ask(t, request("slow")); got != "action=DUNNO" {
		t.Fatal(got)
	}
	if err := <-sd.ctxErr; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Decide ctx: %v", err)
	}
	if got := c.ask(t, request("bob")); !strings.HasPrefix(got, "action=450 ") {
		t.Fatal(got)
	}
}

// A connection's requests share a Decide context only while it is fresh:
// a request after a pause gets a deadline a whole RequestTimeout (less the
// documented tenth) from its first byte, not what was left of an earlier
// request's; and a request sent in two pieces is still answered.
func TestServerDeadlinesRenewed(t *testing.T) {
	const timeout = 2 * time.Second
	var mu sync.Mutex
	var deadlines []time.Time
	dec := mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Error("Decide ctx without deadline")
		}
		mu.Lock()
		deadlines = append(deadlines, dl)
		mu.Unlock()
		return policy.Decision{}
	})
	ts := startServer(t, &Server{Decider: dec, RequestTimeout: timeout}, nil)
	c := ts.dial(t)
	for range 5 {
		if got := c.ask(t, request("alice")); got != "action=DUNNO" {
			t.Fatal(got)
		}
	}
	time.Sleep(timeout / 2)
	sent := time.Now()
	if got := c.ask(t, request("alice")); got != "action=DUNNO" {
		t.Fatal(got)
	}
	// In two pieces: the rest of the request comes after its first byte.
	req := request("bob")
	if _, err := c.Write(req[:10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := c.ask(t, req[10:]); got != "action=DUNNO" {
		t.Fatal(got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(deadlines) != 7 {
		t.Fatalf("%d decisions", len(deadlines))
	}
	if min := sent.Add(timeout - timeout/10); deadlines[5].Before(min) {
		t.Fatalf("request after a pause: deadline %s, want at least %s (first byte + 0.9 RequestTimeout)",
			deadlines[5].Format(time.StampMicro), min.Format(time.StampMicro))
	}
}

func mustListen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestServeNoDecider(t *testing.T) {
	var s Server
	if err := s.Serve(mustListen(t)); !errors.Is(err, ErrNoDecider) {
		t.Fatalf("Serve: %v", err)
	}
}

// flakyListener fails its first Accepts with a temporary error.
type flakyListener struct {
	net.Listener
	failures atomic.Int32
}

type tempError struct{}

func (tempError) Error() string   { return "accept: too many open files" }
func (tempError) Temporary() bool { return true }
func (tempError) Timeout() bool   { return false }

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, tempError{}
	}
	return l.Listener.Accept()
}

func TestServerAcceptBackoff(t *testing.T) {
	fl := &flakyListener{Listener: mustListen(t)}
	fl.failures.Store(3)
	ts := startServer(t, &Server{}, fl)
	if got := ts.dial(t).ask(t, request("alice")); got != "action=DUNNO" {
		t.Fatal(got)
	}
	if log := ts.log.String(); strings.Count(log, "accept error") != 3 {
		t.Fatalf("want 3 accept errors logged:\n%s", log)
	}
}

func TestServerPermanentAcceptError(t *testing.T) {
	l := mustListen(t)
	srv := &Server{Decider: testDecider, Logger: slog.New(slog.DiscardHandler)}
	l.Close() // Accept fails at once with a permanent error
	err := srv.Serve(l)
	if err == nil || errors.Is(err, ErrServerClosed) || !strings.HasPrefix(err.Error(), "postfix: ") {
		t.Fatalf("Serve on a closed listener: %v", err)
	}
}

func ExampleServer() {
	srv := &Server{
		Decider: mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
			if req.SASLUsername == "bulk" {
				return policy.Decision{Action: policy.Defer, Text: "Sending rate exceeded"}
			}
			return policy.Decision{}
		}),
		Logger: slog.New(slog.DiscardHandler),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(l)
	defer srv.Shutdown(context.Background())

	// What Postfix's check_policy_service does, on one connection.
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		panic(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, user := range []string{"alice", "bulk"} {
		fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=RCPT\nsasl_username=%s\n\n", user)
		line, _ := br.ReadString('\n')
		br.ReadString('\n') // the empty line
		fmt.Print(line)
	}
	// Output:
	// action=DUNNO
	// action=450 4.7.1 Sending rate exceeded
}

// requestBuffered finds a whole request at the end of what was read, and
// nothing else.
func TestRequestBuffered(t *testing.T) {
	for in, want := range map[string]bool{
		"":                                    false,
		"request=smtpd_access_policy\n":       false,
		"request=smtpd_access_policy\n\n":     true,
		"request=smtpd_access_policy\r\n\r\n": true,
		"a=b\n\nc=d\n":                        false, // the second request is not whole
	} {
		br := bufio.NewReader(strings.NewReader(in))
		br.Peek(1)
		if got := requestBuffered(br); got != want {
			t.Errorf("%q: %v, want %v", in, got, want)
		}
	}
}

// TestServerRequestReceived checks that every request reaches the Decider
// with Request.Received set, no earlier than the connection was opened and
// later for a later request of the connection (the time it is decided at;
// no timing is asserted).
func TestServerRequestReceived(t *testing.T) {
	var mu sync.Mutex
	var got []time.Time
	ts := startServer(t, &Server{Decider: mta.DeciderFunc(func(_ context.Context, req *policy.Request) policy.Decision {
		mu.Lock()
		got = append(got, req.Received)
		mu.Unlock()
		return policy.Decision{}
	})}, nil)
	opened := time.Now()
	c := ts.dial(t)
	c.ask(t, request("alice"))
	c.ask(t, request("alice"))
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d requests decided, want 2", len(got))
	}
	if got[0].Before(opened) || got[1].Before(got[0]) {
		t.Errorf("Received %v, %v for requests sent after %v: want set, in order", got[0], got[1], opened)
	}
}
