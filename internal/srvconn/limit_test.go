package srvconn

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

var errTestClosed = errors.New("test: closed")

// budgetServer serves a Tracker with budget on a loopback listener; each
// accepted connection's key is its server side, sent on accepted.
type budgetServer struct {
	t        *Tracker[net.Conn]
	addr     string
	accepted chan net.Conn
	logs     *bytes.Buffer
	logMu    sync.Mutex
	mu       sync.Mutex
	closed   map[string]int
}

func startBudget(t *testing.T, b Budget) *budgetServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &budgetServer{addr: ln.Addr().String(), accepted: make(chan net.Conn, 100), logs: new(bytes.Buffer), closed: map[string]int{}}
	b.Closed = func(reason string) {
		s.mu.Lock()
		s.closed[reason]++
		s.mu.Unlock()
	}
	s.t = New[net.Conn](errTestClosed, "test", b)
	log := slog.New(slog.NewTextHandler(lockedWriter{&s.logMu, s.logs}, nil))
	go s.t.Serve(ln, Accept[net.Conn]{Logger: log, New: func(rwc net.Conn) net.Conn { return rwc },
		Refused: func(net.Conn) {}, Start: func(c net.Conn) { s.accepted <- c }})
	t.Cleanup(func() { s.t.Close() })
	return s
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// dial connects from the loopback address from (e.g. "127.0.0.2").
func (s *budgetServer) dial(t *testing.T, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accept dials from and returns the server side of the accepted connection.
func (s *budgetServer) accept(t *testing.T, from string) (client, server net.Conn) {
	t.Helper()
	c := s.dial(t, from)
	select {
	case sc := <-s.accepted:
		return c, sc
	case <-time.After(10 * time.Second):
		t.Fatal("connection not accepted")
	}
	return nil, nil
}

func (s *budgetServer) mark(c net.Conn, a Activity) {
	s.t.Lock()
	s.t.MarkLocked(c, a)
	s.t.Unlock()
}

// closedByServer reports whether the server closed c (EOF or reset within 10 s).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func (s *budgetServer) count(reason string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed[reason]
}

// At the cap a new connection closes the oldest idle one; with every
// connection busy it is closed itself, and each is counted by reason.
func TestBudgetEvictsOldestIdle(t *testing.T) {
	for range 3 { // the accept loop races the marks; repeat
		s := startBudget(t, Budget{Max: 3})
		var clients, servers []net.Conn
		for range 3 {
			c, sc := s.accept(t, "127.0.0.1")
			clients, servers = append(clients, c), append(servers, sc)
		}
		s.mark(servers[0], Busy)
		s.mark(servers[0], Idle) // idle again: now the newest idle
		c4, _ := s.accept(t, "127.0.0.1")
		if !closedByServer(clients[1]) {
			t.Fatal("the oldest idle connection was not closed for a new one")
		}
		if st := s.t.Stats(); st.Open != 3 || st.Closed[ReasonEvicted] != 1 || s.count(ReasonEvicted) != 1 {
			t.Fatalf("stats %+v, callback %v; want 3 open, 1 evicted", st, s.closed)
		}
		if !stillOpen(clients[0]) {
			t.Fatal("a newer idle connection was closed too")
		}
		s.t.Lock()
		for c := range s.t.conns {
			s.t.MarkLocked(c, Busy)
		}
		s.t.Unlock()
		c5 := s.dial(t, "127.0.0.1")
		if !closedByServer(c5) {
			t.Fatal("a connection over the cap with every connection busy was kept")
		}
		if st := s.t.Stats(); st.Open != 3 || st.Closed[ReasonMaxConnections] != 1 || st.Closed[ReasonMaxPerClient] != 0 {
			t.Fatalf("stats %+v; want 3 open, 1 closed at max_connections", st)
		}
		_ = c4
		s.logMu.Lock()
		logs := s.logs.String()
		s.logMu.Unlock()
		if !strings.Contains(logs, "max_connections reached") {
			t.Fatalf("refusal not logged:\n%s", logs)
		}
	}
}

// stillOpen reports whether c is open: a short read times out.
func stillOpen(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// One client address is capped on its own: its new connection closes its
// own oldest idle one, never another client's, and with all of its
// connections busy it is refused while another address is still served.
func TestBudgetPerClient(t *testing.T) {
	s := startBudget(t, Budget{Max: 10, PerClient: 2})
	other, _ := s.accept(t, "127.0.0.2")
	a1, s1 := s.accept(t, "127.0.0.1")
	_, s2 := s.accept(t, "127.0.0.1")
	s.mark(s2, Busy)
	s.accept(t, "127.0.0.1")
	if !closedByServer(a1) {
		t.Fatal("the client's own idle connection was not closed for its new one")
	}
	_ = s1
	s.t.Lock()
	for c := range s.t.conns {
		s.t.MarkLocked(c, Busy)
	}
	s.t.Unlock()
	if c := s.dial(t, "127.0.0.1"); !closedByServer(c) {
		t.Fatal("a third busy connection from one client was kept")
	}
	s.accept(t, "127.0.0.3")
	if !stillOpen(other) {
		t.Fatal("another client's connection was closed")
	}
	if st := s.t.Stats(); st.Open != 4 || st.PerClient != 2 || st.Closed[ReasonMaxPerClient] != 1 || st.Closed[ReasonEvicted] != 1 {
		t.Fatalf("stats %+v; want 4 open, 1 max_per_client, 1 evicted", st)
	}
}

func TestDefaultMaxConns(t *testing.T) {
	if n := DefaultMaxConns(); n < 1 || n > MaxConnsCeiling {
		t.Fatalf("DefaultMaxConns() = %d", n)
	}
	if n := DefaultMilterConns(); n < 1 || n > DefaultMaxConns() {
		t.Fatalf("DefaultMilterConns() = %d", n)
	}
	if got := (Budget{Max: 100, PerClient: 256}).perClient(); got != 100 {
		t.Fatalf("per-client cap above Max = %d, want Max", got)
	}
}

// A connection Held inside a transaction gives way only when no
// connection is Idle, the one held longest first.
func TestBudgetClosesHeldAfterIdle(t *testing.T) {
	s := startBudget(t, Budget{Max: 3})
	h1, sh1 := s.accept(t, "127.0.0.1")
	h2, sh2 := s.accept(t, "127.0.0.1")
	idle, _ := s.accept(t, "127.0.0.1")
	for _, c := range []net.Conn{sh1, sh2} {
		s.mark(c, Busy)
		s.mark(c, Held)
	}
	_, sn := s.accept(t, "127.0.0.1")
	if !closedByServer(idle) || !stillOpen(h1) {
		t.Fatal("a held connection was closed while one was idle")
	}
	s.mark(sn, Busy)
	s.accept(t, "127.0.0.1")
	if !closedByServer(h1) || !stillOpen(h2) {
		t.Fatal("the connection held longest was not the one closed")
	}
}
