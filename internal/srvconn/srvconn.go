// Package srvconn is the connection lifecycle of mta/postfix and
// mta/milter in the shape of net/http's Server: listeners and connections,
// the accept loop with back-off, the allow-list, Shutdown and Close. With
// it: ListenUnix, Limiter (a connection cap over several listeners) and
// InheritedListeners (systemd socket activation, sd_listen_fds(3)).
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

// Tracker tracks a server's listeners and connections, keyed by C. Methods
// are safe for concurrent use; Lock and Unlock lend the protocol the mutex
// for its own per-connection state, and the ...Locked methods need it held.
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
// once stopped; name prefixes accept errors.
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

// BaseContext is the parent of every ctx passed on; Close cancels it.
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

// Remove forgets c's ended connection; whether c was still tracked.
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
	// New makes the connection's key from it, before the allow-list.
	New func(rwc net.Conn) C
	// Refused is called for a refused connection before it is closed.
	Refused func(c C)
	// Start is called for an allowed, tracked connection; must not block.
	Start func(c C)
}

// Serve accepts connections on l for a until l fails or the server stops,
// backing off (5 ms doubling to 1 s) on temporary errors. It closes l and
// returns errClosed or the accept error.
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

// Allowed applies the allow-list to rwc: TCP from allowed (empty:
// loopback; IPv4-mapped as IPv4); unix sockets always; anything else
// refused.
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

// RemoteString is rwc's remote address (or network) for the log.
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

// Shutdown closes the listeners, then the connections idle reports (with
// the mutex held), polling until none is left and every Serve returned.
// ctx.Err() if ctx ends first; errClosed if already stopped.
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

// Close closes listeners and connections, cancels BaseContext; errClosed if done.
func (t *Tracker[C]) Close() error {
	err := t.beginClose()
	if errors.Is(err, t.errClosed) {
		err = nil
	}
	// Connections close before the contexts are cancelled, so no reply
	// is written after Close.
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

// OrDefault returns v if it is positive, else d: a server field's value.
func OrDefault[T int64 | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}
