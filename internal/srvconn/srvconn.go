// Package srvconn is the connection life cycle of mta/postfix and
// mta/milter in the shape of net/http's Server (accept loop with back-off,
// allow-list, connection Budget, Shutdown, Close), with ListenUnix,
// systemd socket activation (sd_listen_fds(3)) and HTTPLimit.
package srvconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Tracker tracks a server's listeners and connections, keyed by C. Safe
// for concurrent use; Lock lends the protocol the mutex for its own
// per-connection state, and the ...Locked methods need it held.
type Tracker[C comparable] struct {
	errClosed  error
	name       string // prefix of accept errors
	baseCtx    context.Context
	cancelBase context.CancelFunc

	mu         sync.Mutex
	closed     bool // Shutdown or Close called
	hardClosed bool // Close called
	done       chan struct{}
	listeners  map[*net.Listener]struct{}
	conns      map[C]*entry
	serveGroup sync.WaitGroup

	budget  Budget
	open    int                        // entries counted against the budget
	clients map[netip.Addr]int         // counted entries by client address
	nClosed [len(Reasons)]atomic.Int64 // by index in Reasons
	logs    *ThrottledLog              // set by the first Serve
}

// entry is one connection, under Tracker.mu.
type entry struct {
	rwc     net.Conn
	closing bool // the Tracker has closed rwc
	counted bool // counted in open and clients
	state   Activity
	since   time.Time // accepted, or last marked idle
	client  netip.Addr
}

// New returns a Tracker whose Serve, Shutdown and Close return errClosed
// once stopped; name prefixes accept errors.
func New[C comparable](errClosed error, name string, budget Budget) *Tracker[C] {
	t := &Tracker[C]{
		errClosed: errClosed,
		name:      name,
		done:      make(chan struct{}),
		listeners: make(map[*net.Listener]struct{}),
		conns:     make(map[C]*entry),
		budget:    budget,
		clients:   make(map[netip.Addr]int),
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

// ClosingLocked reports whether the Tracker has closed c's connection.
func (t *Tracker[C]) ClosingLocked(c C) bool {
	e := t.conns[c]
	return e != nil && e.closing
}

// ClosedForRoom reports whether the budget closed c for a new connection.
func (t *Tracker[C]) ClosedForRoom(c C) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ClosingLocked(c) && !t.closed
}

// IsClosed reports whether Shutdown or Close has been called.
func (t *Tracker[C]) IsClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Remove forgets c's ended connection.
func (t *Tracker[C]) Remove(c C) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.conns[c]; ok {
		t.releaseLocked(e)
		delete(t.conns, c)
	}
}

// Activity is what a connection is doing (MarkLocked): which connections
// may be closed to make room, in which order. A new connection is Idle.
type Activity int

const (
	Idle Activity = iota // waiting for a request; closed first to make room, oldest first
	Held                 // waiting inside a transaction; closed for room only when none is Idle
	Busy                 // answering a request; never closed for room
)

// MarkLocked marks what c is doing; a change from Busy starts its idle time.
func (t *Tracker[C]) MarkLocked(c C, a Activity) {
	e := t.conns[c]
	if e == nil {
		return
	}
	if e.state == Busy && a != Busy {
		e.since = time.Now()
	}
	e.state = a
}

// CountClosed counts a connection closed for a budget reason.
func (t *Tracker[C]) CountClosed(reason string) {
	if i := slices.Index(Reasons[:], reason); i >= 0 {
		t.nClosed[i].Add(1)
	}
	if t.budget.Closed != nil {
		t.budget.Closed(reason)
	}
}

// Stats returns the budget's state now.
func (t *Tracker[C]) Stats() Stats {
	st := Stats{Max: max(t.budget.Max, 0), PerClient: t.budget.perClient(), Closed: make(map[string]int64, len(Reasons))}
	for i, r := range Reasons {
		st.Closed[r] = t.nClosed[i].Load()
	}
	t.mu.Lock()
	st.Open = t.open
	t.mu.Unlock()
	return st
}

// releaseLocked takes e off the budget's counts, once.
func (t *Tracker[C]) releaseLocked(e *entry) {
	if !e.counted {
		return
	}
	e.counted = false
	t.open--
	if e.client.IsValid() {
		if t.clients[e.client]--; t.clients[e.client] <= 0 {
			delete(t.clients, e.client)
		}
	}
}

// admitLocked makes room for a connection from client, closing the oldest
// idle connection within a cap that is reached; the reason if none.
func (t *Tracker[C]) admitLocked(client netip.Addr) (reason string, ok bool) {
	pc := t.budget.perClient()
	if pc > 0 && (pc < t.budget.Max || t.budget.Max < 1) && client.IsValid() && t.clients[client] >= pc {
		if !t.evictLocked(client) {
			return ReasonMaxPerClient, false
		}
	}
	if t.budget.Max > 0 && t.open >= t.budget.Max {
		if !t.evictLocked(netip.Addr{}) {
			return ReasonMaxConnections, false
		}
	}
	return "", true
}

// evictLocked closes the connection idle longest (of client, if valid),
// Idle before Held; false if every one is Busy.
func (t *Tracker[C]) evictLocked(client netip.Addr) bool {
	var oldest *entry
	for _, e := range t.conns {
		if !e.counted || e.state == Busy || (client.IsValid() && e.client != client) {
			continue
		}
		if oldest == nil || e.state < oldest.state || (e.state == oldest.state && e.since.Before(oldest.since)) {
			oldest = e
		}
	}
	if oldest == nil {
		return false
	}
	oldest.closing = true
	oldest.rwc.Close()
	t.releaseLocked(oldest)
	t.CountClosed(ReasonEvicted)
	t.logs.Warn("idle connection closed to make room for a new one", "server", t.name,
		"remote", RemoteString(oldest.rwc), "max_connections", t.budget.Max, "max_per_client", t.budget.perClient())
	return true
}

// Accept says what Serve does with each accepted connection.
type Accept[C comparable] struct {
	Logger  *slog.Logger
	Allowed []netip.Prefix   // the allow-list (Allowed)
	New     func(net.Conn) C // the key, made before the allow-list
	Refused func(c C)        // refused by the allow-list, before the close
	Start   func(c C)        // allowed and tracked; must not block
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
	if t.logs == nil {
		t.logs = NewThrottledLog(a.Logger, limitLogEvery)
	}
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
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
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
		client := clientAddr(rwc)
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			rwc.Close()
			return t.errClosed
		}
		if reason, ok := t.admitLocked(client); !ok {
			t.mu.Unlock()
			// Counted before the close, so the client finds it counted.
			t.CountClosed(reason)
			t.logs.Warn("connection closed at once: "+reason+" reached", "server", t.name, "listener", l.Addr().String(),
				"remote", RemoteString(rwc), "max_connections", t.budget.Max, "max_per_client", t.budget.perClient())
			rwc.Close()
			continue
		}
		t.conns[c] = &entry{rwc: rwc, counted: true, since: time.Now(), client: client}
		t.open++
		if client.IsValid() {
			t.clients[client]++
		}
		t.mu.Unlock()
		a.Start(c)
	}
}

// Allowed applies the allow-list to rwc: TCP from allowed (empty: loopback;
// IPv4-mapped as IPv4); unix sockets always; anything else refused.
func Allowed(allowed []netip.Prefix, rwc net.Conn, unixListener bool) bool {
	switch rwc.RemoteAddr().(type) {
	case *net.TCPAddr:
		addr := clientAddr(rwc)
		if len(allowed) == 0 {
			return addr.IsLoopback()
		}
		return slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(addr) })
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

// Shutdown closes the listeners, then the connections idle reports (mutex
// held), polling until none is left and every Serve returned; ctx.Err()
// if ctx ends first, errClosed if already stopped.
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
	// Connections close before the contexts are cancelled: no reply after Close.
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
		t.releaseLocked(e)
	}
	t.mu.Unlock()
	t.cancelBase()
	return err
}

// beginClose marks the server closed and closes its listeners.
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

// closeIdle closes the connections idle reports; the number left.
func (t *Tracker[C]) closeIdle(idle func(c C) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c, e := range t.conns {
		if !e.closing && idle(c) {
			e.closing = true
			e.rwc.Close()
			t.releaseLocked(e)
		}
	}
	return len(t.conns)
}

// OrDefault returns v if it is positive, else d.
func OrDefault[T int64 | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// ThrottledLog logs each message at most once per every, with the number
// of occurrences it stands for. Safe for concurrent use.
type ThrottledLog struct {
	log   *slog.Logger
	every time.Duration
	mu    sync.Mutex
	last  map[string]time.Time
	count map[string]int
}

// NewThrottledLog returns a ThrottledLog on log.
func NewThrottledLog(log *slog.Logger, every time.Duration) *ThrottledLog {
	return &ThrottledLog{log: log, every: every, last: map[string]time.Time{}, count: map[string]int{}}
}

// Warn logs msg with args and "occurrences" at Warn, unless msg was logged
// less than every ago.
func (t *ThrottledLog) Warn(msg string, args ...any) {
	t.mu.Lock()
	t.count[msg]++
	now := time.Now()
	if now.Sub(t.last[msg]) < t.every {
		t.mu.Unlock()
		return
	}
	n := t.count[msg]
	t.last[msg], t.count[msg] = now, 0
	t.mu.Unlock()
	t.log.Warn(msg, append(args, "occurrences", n, "per", t.every.String())...)
}
