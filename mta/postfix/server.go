package postfix

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Default timeouts of a Server.
const (
	// DefaultIdleTimeout is longer than Postfix's
	// smtpd_policy_service_max_idle (300 s), so that Postfix, not the
	// server, normally closes an idle connection.
	DefaultIdleTimeout = 330 * time.Second
	// DefaultRequestTimeout is far below Postfix's
	// smtpd_policy_service_timeout (100 s), so that a fail-open DUNNO after
	// a slow Decide reaches Postfix before it gives up and applies
	// smtpd_policy_service_default_action (451 4.3.5, a temporary failure
	// of the mail).
	DefaultRequestTimeout = 10 * time.Second
)

// Reasons passed to Metrics.BadInput and logged when a connection is closed
// without a reply.
const (
	ReasonLineTooLong       = "line_too_long"       // ErrLineTooLong
	ReasonTooManyAttributes = "too_many_attributes" // ErrTooManyAttributes
	ReasonMalformed         = "malformed"           // ErrMalformed
	ReasonUnknownRequest    = "unknown_request"     // ErrUnknownRequest
	ReasonUnexpectedEOF     = "unexpected_eof"      // io.ErrUnexpectedEOF
	ReasonTimeout           = "timeout"             // request not complete within RequestTimeout
	ReasonReadError         = "read_error"          // connection error inside a request
)

// Metrics receives a Server's counts: those of every front end (mta.Metrics:
// Fault kinds are mta.FaultPanic, a panic in Decide answered with DUNNO,
// and mta.FaultDecision) and the requests answered. Methods are called
// from the accept and connection goroutines, concurrently: they must be
// safe for concurrent use and must not block.
type Metrics interface {
	mta.Metrics
	// Request is called once per answered request with the Decision's
	// action and the time from the request's first byte
	// (Request.Received) to its reply being written.
	Request(action policy.Action, elapsed time.Duration)
}

// Server answers Postfix policy delegation requests (and Exim readsocket
// queries) with the verdicts of a Decider, in the shape of net/http's
// Server: configure the exported fields, call Serve for each listener, and
// Shutdown or Close to stop.
//
// Each connection carries any number of requests, answered in order. A
// connection that sends bad input, or does not complete a request within
// RequestTimeout, is logged (one line with its connection id and the
// reason), counted and closed without a reply, which makes Postfix retry;
// other connections are not affected. A Decide that panics or returns a
// fault is answered with DUNNO (fail open), logged and counted, and the
// connection carries on.
//
// The exported fields must not be changed once Serve has been called. The
// methods are safe for concurrent use.
type Server struct {
	// Decider decides every request. Required. ctx carries the request's
	// deadline (its first byte plus RequestTimeout, up to a tenth of that,
	// at most a second, earlier: a connection's requests within a second
	// share one context) and is cancelled by Close. The Server reuses
	// *req for the connection's next request: the Decider keeps a copy or
	// its strings, not the pointer. req.Received is the time the request's
	// first byte arrived. A panic in Decide is recovered and answered with
	// DUNNO.
	Decider mta.Decider
	// Logger receives the connection log: every line carries the
	// connection id ("conn"). Non-Pass decisions and faults are logged at
	// Info and Warn, passes at Debug. Nil means slog.Default().
	Logger *slog.Logger
	// Metrics, if non-nil, receives the server's counts.
	Metrics Metrics
	// IdleTimeout is how long a connection may wait for the first byte
	// of its next request before the server closes it (up to a tenth of
	// it, at most a second, less: deadlines are renewed about once a
	// second, not per request). Zero means DefaultIdleTimeout (330 s).
	IdleTimeout time.Duration
	// RequestTimeout bounds one request from its first byte: reading the
	// rest of it, Decide (through the ctx deadline) and, separately, the
	// write of the reply, each to within a tenth of it (at most a second)
	// less. Zero means DefaultRequestTimeout (10 s).
	RequestTimeout time.Duration
	// AllowedNetworks lists the client networks a TCP connection may
	// come from; a connection from elsewhere is closed before anything
	// is read from it. Empty means loopback only (127.0.0.0/8, ::1).
	// IPv4-mapped IPv6 addresses are matched as IPv4. Unix-socket
	// connections are not checked (the socket's file mode and group
	// control them); connections of any other kind are refused.
	AllowedNetworks []netip.Prefix

	initOnce sync.Once
	nextID   atomic.Uint64
	// life tracks the listeners and connections; its mutex guards
	// conn.active.
	life *srvconn.Tracker[*conn]
}

// conn is one accepted connection.
type conn struct {
	rwc net.Conn
	id  uint64
	log *slog.Logger
	// Under Server.life's mutex: active is set while a request is
	// handled.
	active bool
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.life = srvconn.New[*conn](ErrServerClosed, "postfix")
	})
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) metrics() Metrics {
	if s.Metrics != nil {
		return s.Metrics
	}
	return noMetrics{}
}

func (s *Server) idleTimeout() time.Duration {
	if s.IdleTimeout > 0 {
		return s.IdleTimeout
	}
	return DefaultIdleTimeout
}

func (s *Server) requestTimeout() time.Duration {
	if s.RequestTimeout > 0 {
		return s.RequestTimeout
	}
	return DefaultRequestTimeout
}

// Serve accepts connections on l and serves each on its own goroutine until
// l fails or the server is shut down. It backs off (5 ms doubling to 1 s) on
// temporary accept errors such as running out of file descriptors.
//
// Serve always returns a non-nil error and closes l: ErrServerClosed after
// Shutdown or Close, ErrNoDecider when Decider is nil, else the accept
// error. Serve may be called for several listeners at once.
func (s *Server) Serve(l net.Listener) error {
	s.init()
	if s.Decider == nil {
		l.Close()
		return ErrNoDecider
	}
	log := s.logger()
	return s.life.Serve(l, srvconn.Accept[*conn]{
		Logger:  log,
		Allowed: s.AllowedNetworks,
		New: func(rwc net.Conn) *conn {
			c := &conn{rwc: rwc, id: s.nextID.Add(1)}
			c.log = log.With("conn", c.id, "remote", srvconn.RemoteString(rwc))
			return c
		},
		Refused: func(c *conn) {
			s.metrics().Conn(false)
			c.log.Warn("connection refused by allow-list")
		},
		Start: func(c *conn) {
			s.metrics().Conn(true)
			go s.serveConn(c)
		},
	})
}

// setActive marks c as handling a request, or as idle; it reports false
// when c must stop: the server has closed c, or c would become idle while
// the server shuts down. A request whose first byte arrived before shutdown
// is still answered.
func (s *Server) setActive(c *conn, active bool) bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.ClosingLocked(c) || (!active && s.life.ClosedLocked()) {
		return false
	}
	c.active = active
	return true
}

// serveConn answers the requests of one connection until it ends.
func (s *Server) serveConn(c *conn) {
	m := s.metrics()
	defer func() {
		if r := recover(); r != nil {
			c.log.Error("panic serving connection", "panic", r, "stack", string(debug.Stack()))
			m.Fault(mta.FaultPanic)
		}
		c.rwc.Close()
		s.life.Remove(c)
		m.ConnDone()
	}()

	c.log.Debug("connection opened")
	br := bufio.NewReader(c.rwc)
	bw := bufio.NewWriterSize(c.rwc, MaxReplyLen+2)
	dec := NewDecoder(br)
	idle, reqTimeout := s.idleTimeout(), s.requestTimeout()
	var req policy.Request
	tracker := messageTracker{conn: c.id}
	dl := deadlines{idle: idle, request: reqTimeout}
	defer dl.release()
	for n := 0; ; n++ {
		dl.waitRequest(c.rwc, time.Now())
		if _, err := br.Peek(1); err != nil {
			switch {
			case err == io.EOF:
				c.log.Debug("connection closed by client", "requests", n)
			case errors.Is(err, os.ErrDeadlineExceeded):
				c.log.Debug("idle timeout", "requests", n, "idle", idle)
			case s.life.IsClosed():
				c.log.Debug("connection closed by shutdown", "requests", n)
			default:
				c.log.Debug("read error", "requests", n, "err", err)
			}
			return
		}
		if !s.setActive(c, true) {
			return
		}
		start := time.Now()
		ctx := dl.readRequest(c.rwc, br, start, s.life.BaseContext())
		if err := dec.Decode(&req); err != nil {
			reason := badInputReason(err)
			c.log.Warn("closing connection without reply", "reason", reason, "err", err, "requests", n)
			m.BadInput(reason)
			return
		}

		tracker.fill(&req)
		req.Received = start
		d := s.decide(c, &req, ctx)

		dl.writeReply(c.rwc, time.Now())
		if err := WriteReply(bw, d, req.ProtocolState); err != nil {
			c.log.Info("write error", "err", err)
			return
		}
		m.Request(d.Action, time.Since(start))
		if !s.setActive(c, false) {
			return // shutting down: the in-flight request is answered
		}
	}
}

// deadlines sets a connection's read and write deadlines and the context of
// its requests without a timer per request: a deadline is moved only when
// it is more than a tenth of its timeout (at most a second) short of where
// a new one would be, so a connection busy with many requests a second
// renews each about once a second. A timeout therefore ends between 0.9 and
// 1.0 times its configured length (at most a second early). The read
// deadline of a request already wholly received is not set at all: its
// decoding does not read from the connection.
type deadlines struct {
	idle, request time.Duration
	read          time.Time // the read deadline set
	readIdle      bool      // read is an idle deadline (else a request's)
	write         time.Time // the write deadline set
	ctx           context.Context
	ctxDeadline   time.Time
	cancel        context.CancelFunc
}

// slack is how far a deadline for timeout d may fall short.
func slack(d time.Duration) time.Duration { return min(d/10, time.Second) }

// waitRequest makes the connection wait at most the idle timeout for the
// first byte of the next request.
func (dl *deadlines) waitRequest(rwc net.Conn, now time.Time) {
	want := now.Add(dl.idle)
	if dl.readIdle && dl.read.After(want.Add(-slack(dl.idle))) {
		return
	}
	dl.read, dl.readIdle = want, true
	rwc.SetReadDeadline(want)
}

// readRequest bounds the reading of the request whose first byte arrived
// at start, unless it is wholly buffered in br, and returns the context of
// its decision: a child of base ending at about start + the request
// timeout.
func (dl *deadlines) readRequest(rwc net.Conn, br *bufio.Reader, start time.Time, base context.Context) context.Context {
	want := start.Add(dl.request)
	if !requestBuffered(br) {
		dl.read, dl.readIdle = want, false
		rwc.SetReadDeadline(want)
	}
	if dl.ctx == nil || dl.ctx.Err() != nil || dl.ctxDeadline.Before(want.Add(-slack(dl.request))) {
		dl.release()
		dl.ctx, dl.cancel = context.WithDeadline(base, want)
		dl.ctxDeadline = want
	}
	return dl.ctx
}

// writeReply bounds the write of a reply starting now.
func (dl *deadlines) writeReply(rwc net.Conn, now time.Time) {
	want := now.Add(dl.request)
	if dl.write.After(want.Add(-slack(dl.request))) {
		return
	}
	dl.write = want
	rwc.SetWriteDeadline(want)
}

// release cancels the requests' context.
func (dl *deadlines) release() {
	if dl.cancel != nil {
		dl.cancel()
		dl.ctx, dl.cancel = nil, nil
	}
}

// requestBuffered reports whether br's buffered bytes end with a whole
// request: an empty line ("\n\n" or "\n\r\n") at their end, as when an
// MTA has written one request and waits for its reply. (A client that
// sends more at once gets the read deadline set: correct, only slower.)
func requestBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.HasSuffix(b, []byte("\n\n")) || bytes.HasSuffix(b, []byte("\n\r\n"))
}

// decide calls the Decider, recovers a panic, and logs the decision.
func (s *Server) decide(c *conn, req *policy.Request, ctx context.Context) (d policy.Decision) {
	m := s.metrics()
	func() {
		defer func() {
			if r := recover(); r != nil {
				d = policy.Decision{Fault: fmt.Errorf("%w: %v", policy.ErrPanic, r)}
				c.log.Error("panic in Decide; answering DUNNO", "panic", r,
					"stack", string(debug.Stack()), slog.Any("req", req))
				m.Fault(mta.FaultPanic)
				m = nil // the fault is logged and counted
			}
		}()
		d = s.Decider.Decide(ctx, req)
	}()
	mta.LogDecision(c.log, m, req, &d)
	return d
}

// badInputReason maps a Decode error to a Reason constant.
func badInputReason(err error) string {
	switch {
	case errors.Is(err, ErrLineTooLong):
		return ReasonLineTooLong
	case errors.Is(err, ErrTooManyAttributes):
		return ReasonTooManyAttributes
	case errors.Is(err, ErrMalformed):
		return ReasonMalformed
	case errors.Is(err, ErrUnknownRequest):
		return ReasonUnknownRequest
	case errors.Is(err, io.ErrUnexpectedEOF):
		return ReasonUnexpectedEOF
	case errors.Is(err, os.ErrDeadlineExceeded):
		return ReasonTimeout
	default:
		return ReasonReadError
	}
}

// Shutdown shuts the server down gracefully: it closes the listeners (Serve
// returns ErrServerClosed), closes connections waiting for a request, lets
// every request in progress finish and be answered, closing its connection
// afterwards, and returns when all connections are closed. If ctx ends first,
// Shutdown returns ctx.Err() and leaves the remaining connections to Close.
// It returns ErrServerClosed if the server was already shut down or closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	return s.life.Shutdown(ctx, func(c *conn) bool { return !c.active })
}

// Close closes the listeners and every connection at once, including those
// with a request in progress (whose Decide sees its ctx cancelled), without
// waiting for them. For a graceful stop use Shutdown; Close after a
// Shutdown that ran out of time stops what is left. It returns
// ErrServerClosed if Close was already called, else the first error from
// closing a listener.
func (s *Server) Close() error {
	s.init()
	return s.life.Close()
}

type noMetrics struct{}

func (noMetrics) Conn(bool)                            {}
func (noMetrics) ConnDone()                            {}
func (noMetrics) Request(policy.Action, time.Duration) {}
func (noMetrics) BadInput(string)                      {}
func (noMetrics) Fault(string)                         {}
