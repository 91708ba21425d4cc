package srvconn

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// getOn sends GET / on c (keep-alive) and returns the status line's code.
func getOn(c net.Conn, br *bufio.Reader) (int, error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Idle keep-alive connections at the cap give way to a new one, oldest
// first; while every connection is in a request a new one waits for room.
func TestHTTPLimitClosesIdleAtCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	lim := NewHTTPLimit(3)
	hs := &http.Server{ConnState: lim.ConnState, IdleTimeout: time.Hour, ReadHeaderTimeout: time.Hour,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/block" {
				<-release
			}
			fmt.Fprint(w, "ok")
		})}
	go hs.Serve(lim.Listener(ln))
	defer hs.Close()
	for round := range 3 { // repeated: the ConnState hook races the next dial
		var conns []net.Conn
		for range lim.Max() {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if code, err := getOn(c, bufio.NewReader(c)); err != nil || code != 200 {
				t.Fatalf("round %d: keep-alive request: %d %v", round, code, err)
			}
			conns = append(conns, c)
			waitIdle(t, lim, len(conns))
		}
		before := lim.Evicted()
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			t.Fatalf("round %d: a request with %d idle keep-alive connections open: %v", round, lim.Max(), err)
		}
		resp.Body.Close()
		if lim.Evicted() == before {
			t.Fatalf("round %d: no idle connection was closed", round)
		}
		if _, err := getOn(conns[0], bufio.NewReader(conns[0])); err == nil {
			t.Fatalf("round %d: the oldest idle connection still served", round)
		}
		for _, c := range conns {
			c.Close()
		}
		for i := 0; lim.Open() > 0; i++ {
			if i == 500 {
				t.Fatalf("round %d: %d connections left open", round, lim.Open())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Every connection busy: a new one waits, then is served.
	for range lim.Max() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /block HTTP/1.1\r\nHost: x\r\n\r\n")
	}
	for i := 0; lim.Open() < lim.Max() || idleConns(lim) > 0; i++ {
		if i == 500 {
			t.Fatalf("%d connections open (%d idle), want %d busy", lim.Open(), idleConns(lim), lim.Max())
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan string, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + ln.Addr().String() + "/")
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	select {
	case got := <-done:
		t.Fatalf("served while every connection was busy: %q", got)
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if got := <-done; !strings.Contains(got, "ok") {
		t.Fatalf("after room was made: %q", got)
	}
}

// idleConns is the number of h's connections marked idle.
func idleConns(h *HTTPLimit) (n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.conns {
		if c.idle {
			n++
		}
	}
	return n
}

// waitIdle waits until n of h's connections are idle.
func waitIdle(t *testing.T, h *HTTPLimit, n int) {
	t.Helper()
	for i := 0; idleConns(h) != n; i++ {
		if i == 500 {
			t.Fatalf("%d connections idle, want %d", idleConns(h), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Max is the cap.
func (h *HTTPLimit) Max() int { return h.max }

// Open is the number of connections open now.
func (h *HTTPLimit) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Evicted is the number of idle connections closed to make room.
func (h *HTTPLimit) Evicted() int64 { return h.evicted.Load() }
