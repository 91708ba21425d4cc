package srvconn

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// HTTPLimit caps the connections of an http.Server. At the cap a new
// connection closes the oldest idle one (between requests or before the
// first), and waits only while every connection is in a request. Use
// Listener for the server's listener and ConnState as its
// http.Server.ConnState. Safe for concurrent use.
type HTTPLimit struct {
	max      int
	evicted  atomic.Int64 // idle connections closed to make room
	mu       sync.Mutex
	cond     *sync.Cond // signalled when a connection closes or goes idle
	conns    map[*httpConn]struct{}
	closedLn bool // a Listener was closed
}

// NewHTTPLimit returns an HTTPLimit of n connections (< 1: 1).
func NewHTTPLimit(n int) *HTTPLimit {
	h := &HTTPLimit{max: max(n, 1), conns: make(map[*httpConn]struct{})}
	h.cond = sync.NewCond(&h.mu)
	return h
}

// Listener wraps l: Accept returns a connection once there is room for
// it. Closing it closes l and ends a wait for room with net.ErrClosed.
func (h *HTTPLimit) Listener(l net.Listener) net.Listener { return &httpListener{Listener: l, h: h} }

// ConnState is the http.Server.ConnState hook; it sees through a *tls.Conn.
func (h *HTTPLimit) ConnState(nc net.Conn, state http.ConnState) {
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = tc.NetConn()
	}
	c, ok := nc.(*httpConn)
	if !ok {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch state {
	case http.StateIdle:
		c.idle, c.since = true, time.Now()
		h.cond.Broadcast()
	case http.StateActive, http.StateHijacked:
		c.idle = false
	}
}

type httpListener struct {
	net.Listener
	h *HTTPLimit
}

// Accept returns the next connection once there is room for it.
func (l *httpListener) Accept() (net.Conn, error) {
	rwc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	h := l.h
	h.mu.Lock()
	for len(h.conns) >= h.max {
		if h.closedLn {
			h.mu.Unlock()
			rwc.Close()
			return nil, net.ErrClosed
		}
		if victim := h.oldestIdleLocked(); victim != nil {
			victim.idle = false
			h.evicted.Add(1)
			h.mu.Unlock()
			victim.Close()
			h.mu.Lock()
			continue
		}
		h.cond.Wait()
	}
	// A connection that has not sent a request yet is idle since now.
	c := &httpConn{Conn: rwc, h: h, idle: true, since: time.Now()}
	h.conns[c] = struct{}{}
	h.mu.Unlock()
	return c, nil
}

// Close closes the listener and ends Accept's wait for room.
func (l *httpListener) Close() error {
	err := l.Listener.Close()
	l.h.mu.Lock()
	l.h.closedLn = true
	l.h.cond.Broadcast()
	l.h.mu.Unlock()
	return err
}

// oldestIdleLocked is the connection idle longest, or nil.
func (h *HTTPLimit) oldestIdleLocked() *httpConn {
	var oldest *httpConn
	for c := range h.conns {
		if c.idle && (oldest == nil || c.since.Before(oldest.since)) {
			oldest = c
		}
	}
	return oldest
}

// httpConn is a connection counted by an HTTPLimit until its first Close.
type httpConn struct {
	net.Conn
	h     *HTTPLimit
	once  sync.Once
	idle  bool      // under h.mu
	since time.Time // under h.mu: accepted, or last idle
}

func (c *httpConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.h.mu.Lock()
		delete(c.h.conns, c)
		c.h.cond.Broadcast()
		c.h.mu.Unlock()
	})
	return err
}
