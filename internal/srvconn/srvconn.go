// Package srvconn is the connection lifecycle shared by the protocol
// servers mta/postfix and mta/milter, in the shape of net/http's Server: the
// set of listeners and connections, the accept loop with its back-off, the
// allow-list of client networks, and graceful (Shutdown) and hard (Close)
// stops.
//
// What a connection does, and when it counts as idle, stays with each
// protocol: the Tracker only knows its connections by their key C and
// net.Conn.
//
// Three listener helpers go with it: ListenUnix, a unix socket that never
// removes what it did not create; Limiter, a cap on the connections open
// at once over several listeners, so that a flood cannot use up the file
// descriptors the daemon's admin socket and metrics need; and
// InheritedListeners, the sockets systemd passes (socket activation,
// sd_listen_fds(3), through github.com/coreos/go-systemd/v22/activation),
// taken by the addresses they are configured with.
package srvconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Tracker tracks a server's listeners and connections, keyed by C (normally
// the protocol's *conn). Make one with New.
//
// The methods are safe for concurrent use. Lock and Unlock give the
// protocol the Tracker's mutex, to guard its own per-connection state (what
// makes a connection idle) together with the Tracker's: the methods ending
// in Locked must be called with it held, the others without.
type Tracker[C comparable] struct {
	errClosed  error  // returned once closed
	name       string // prefix of accept errors
	baseCtx    context.Context
	cancelBase context.CancelFunc

	mu         sync.Mutex
	closed     bool          // Shutdown or Close called
	hardClosed bool          // Close called
	done       chan struct{} // closed with closed
	listeners  map[*net.Listener]struct{}
	conns      map[C]*entry
	serveGroup sync.WaitGroup
}

// entry is the Tracker's state of one connection, under Tracker.mu.
type entry struct {
	rwc     net.Conn
	closing bool // the Tracker has closed rwc
}

// New returns a Tracker whose Serve, Shutdown and Close return errClosed
// once the server is shut down or closed, and whose Serve prefixes a
// failed accept's error with name ("postfix: accept on ...").
func New[C comparable](errClosed error, name string) *Tracker[C] {
	t := &Tracker[C]{
		errClosed: errClosed,
		name:      name,
		done:      make(chan struct{}),
		listeners: make(map[*net.Listener]struct{}),
		conns:     make(map[C]*entry),
	}
	t.baseCtx, t.cancelBase = context.WithCancel(context.Background())
	return t
}

// BaseContext is the parent of every ctx the server passes on: it is
// cancelled by Close.
func (t *Tracker[C]) BaseContext() context.Context { return t.baseCtx }

// Lock locks the Tracker's mutex.
func (t *Tracker[C]) Lock() { t.mu.Lock() }

// Unlock unlocks the Tracker's mutex.
func (t *Tracker[C]) Unlock() { t.mu.Unlock() }

// ClosedLocked reports whether Shutdown or Close has been called.
func (t *Tracker[C]) ClosedLocked() bool { return t.closed }

// ClosingLocked reports whether the Tracker has closed c's connection
// (Close, or Shutdown finding it idle).
func (t *Tracker[C]) ClosingLocked(c C) bool {
	e := t.conns[c]
	return e != nil && e.closing
}

// IsClosed reports whether Shutdown or Close has been called.
func (t *Tracker[C]) IsClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Remove forgets c once its connection has ended; it reports whether c was
// still tracked.
func (t *Tracker[C]) Remove(c C) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.RemoveLocked(c)
}

// RemoveLocked is Remove with the mutex held.
func (t *Tracker[C]) RemoveLocked(c C) bool {
	_, ok := t.conns[c]
	delete(t.conns, c)
	return ok
}

// Accept says what Serve does with each accepted connection.
type Accept[C comparable] struct {
	// Logger receives the accept errors.
	Logger *slog.Logger
	// Allowed is the allow-list applied by Allowed.
	Allowed []netip.Prefix
	// New makes the connection's key (and its log) from the accepted
	// connection, before the allow-list is applied.
	New func(rwc net.Conn) C
	// Refused is called for a connection refused by the allow-list,
	// before Serve closes it unread.
	Refused func(c C)
	// Start is called for an allowed connection once it is tracked; it
	// must not block (it starts the connection's goroutine).
	Start func(c C)
}

// Serve accepts connections on l until l fails or the server is shut down,
// handing each to a. It backs off (5 ms doubling to 1 s) on temporary accept
// errors such as running out of file descriptors.
//
// Serve always returns a non-nil error and closes l: the errClosed given to
// New after Shutdown or Close, else the accept error prefixed with the
// Tracker's name. Serve may be called for several listeners at once.
func (t *Tracker[C]) Serve(l net.Listener, a Accept[C]) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		l.Close()
		return t.errClosed
	}
	t.listeners[&l] = struct{}{}
	t.serveGroup.Add(1)
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.listeners, &l)
		t.mu.Unlock()
		l.Close()
		t.serveGroup.Done()
	}()

	_, unixListener := l.Addr().(*net.UnixAddr)
	var tempDelay time.Duration
	for {
		rwc, err := l.Accept()
		if err != nil {
			if t.IsClosed() {
				return t.errClosed
			}
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				if tempDelay == 0 {
					tempDelay = 5 * time.Millisecond
				} else {
					tempDelay *= 2
				}
				tempDelay = min(tempDelay, time.Second)
				a.Logger.Warn("accept error; retrying", "listener", l.Addr().String(), "err", err, "delay", tempDelay)
				select {
				case <-time.After(tempDelay):
				case <-t.done:
				}
				continue
			}
			return fmt.Errorf("%s: accept on %s: %w", t.name, l.Addr(), err)
		}
		tempDelay = 0

		c := a.New(rwc)
		if !Allowed(a.Allowed, rwc, unixListener) {
			a.Refused(c)
			rwc.Close()
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			rwc.Close()
			return t.errClosed
		}
		t.conns[c] = &entry{rwc: rwc}
		t.mu.Unlock()
		a.Start(c)
	}
}

// Allowed applies an allow-list to a new connection rwc: a TCP connection
// must come from one of the networks in allowed, or from loopback
// (127.0.0.0/8, ::1) when allowed is empty; IPv4-mapped IPv6 addresses are
// matched as IPv4. A Unix-socket connection is always allowed, and so is
// one of any other kind accepted on a Unix listener (unixListener), whose
// remote address may be unnamed; anything else is refused.
func Allowed(allowed []netip.Prefix, rwc net.Conn, unixListener bool) bool {
	switch ra := rwc.RemoteAddr().(type) {
	case *net.TCPAddr:
		addr, ok := netip.AddrFromSlice(ra.IP)
		if !ok {
			return false
		}
		addr = addr.Unmap().WithZone("")
		if len(allowed) == 0 {
			return addr.IsLoopback()
		}
		for _, p := range allowed {
			if p.Contains(addr) {
				return true
			}
		}
		return false
	case *net.UnixAddr:
		return true
	default:
		return unixListener
	}
}

// RemoteString is rwc's remote address for the log: its string form, else
// its network, else "".
func RemoteString(rwc net.Conn) string {
	ra := rwc.RemoteAddr()
	if ra == nil {
		return ""
	}
	if s := ra.String(); s != "" {
		return s
	}
	return ra.Network()
}

// Shutdown stops the server gracefully: it closes the listeners (Serve
// returns errClosed), then closes the connections for which idle reports
// true (called with the mutex held) and polls, waiting 1 ms doubling to
// 100 ms between rounds, until no connection is left; it then waits for
// every Serve to return and returns nil. If ctx ends first, Shutdown
// returns ctx.Err() and leaves the remaining connections to Close. It
// returns errClosed if the server was already shut down or closed.
func (t *Tracker[C]) Shutdown(ctx context.Context, idle func(c C) bool) error {
	if err := t.beginClose(); err != nil {
		return err
	}
	wait := time.Millisecond
	for {
		if t.closeIdle(idle) == 0 {
			t.serveGroup.Wait()
			return nil
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// Close closes the listeners and every connection at once, busy or not,
// and cancels BaseContext, without waiting. It may follow a Shutdown that
// ran out of time. It returns errClosed if Close was already called, else
// the first error from closing a listener.
func (t *Tracker[C]) Close() error {
	err := t.beginClose()
	if errors.Is(err, t.errClosed) {
		err = nil
	}
	// The connections are closed before the requests' contexts are
	// cancelled: a request that returns on the cancellation must find its
	// connection closed, not write a reply after Close.
	t.mu.Lock()
	if t.hardClosed {
		t.mu.Unlock()
		t.cancelBase()
		return t.errClosed
	}
	t.hardClosed = true
	for _, e := range t.conns {
		e.closing = true
		e.rwc.Close()
	}
	t.mu.Unlock()
	t.cancelBase()
	return err
}

// beginClose marks the server closed and closes its listeners. Calling it
// after Shutdown lets Close still close the connections.
func (t *Tracker[C]) beginClose() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return t.errClosed
	}
	t.closed = true
	close(t.done)
	var err error
	for l := range t.listeners {
		if cerr := (*l).Close(); cerr != nil && err == nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
	}
	return err
}

// closeIdle closes the connections for which idle reports true and returns
// the number of connections left.
func (t *Tracker[C]) closeIdle(idle func(c C) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, e := range t.conns {
		if !e.closing && idle(c) {
			e.closing = true
			e.rwc.Close()
		}
	}
	return len(t.conns)
}
