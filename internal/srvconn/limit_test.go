package srvconn

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Over the cap a connection is closed at once, counted and logged; closing
// an accepted connection frees its slot.
func TestLimiterClosesOverCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var metric atomic.Int64
	lim := NewLimiter(3, slog.New(slog.NewTextHandler(&logs, nil)), func(name string) {
		if name == "policy" {
			metric.Add(1)
		}
	})
	l := lim.Listener(ln, "policy")
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var held []net.Conn
	for range 3 {
		dial()
		held = append(held, <-accepted)
	}
	if lim.Open() != 3 {
		t.Fatalf("open = %d, want 3", lim.Open())
	}
	for range 2 {
		c := dial()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("connection over the cap: read %d, %v; want EOF", n, err)
		}
	}
	if lim.Refused() != 2 || metric.Load() != 2 {
		t.Fatalf("refused %d, metric %d; want 2", lim.Refused(), metric.Load())
	}
	if n := strings.Count(logs.String(), "max_connections reached"); n != 1 {
		t.Fatalf("%d log lines for 2 refusals within 10 s, want 1:\n%s", n, logs.String())
	}
	held[0].Close()
	held[0].Close() // a second Close does not free a second slot
	if lim.Open() != 2 {
		t.Fatalf("open after one close = %d, want 2", lim.Open())
	}
	dial()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("a freed slot was not reused")
	}
	if lim.Refused() != 2 {
		t.Fatalf("refused %d after a slot was freed", lim.Refused())
	}
}

func TestDefaultMaxConns(t *testing.T) {
	if n := DefaultMaxConns(); n < 1 || n > MaxConnsCeiling {
		t.Fatalf("DefaultMaxConns() = %d", n)
	}
}
