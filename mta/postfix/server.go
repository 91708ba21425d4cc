package postfix

import (
	"bufio"
	"bytes"
	"cmp"
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

// Default timeouts: idle above Postfix's smtpd_policy_service_max_idle
// (300 s), request far below smtpd_policy_service_timeout (100 s).
const (
	DefaultIdleTimeout    = 330 * time.Second
	DefaultRequestTimeout = 10 * time.Second
)

// Reasons passed to Metrics.BadInput.
const (
	ReasonLineTooLong       = "line_too_long"       // ErrLineTooLong
	ReasonTooManyAttributes = "too_many_attributes" // ErrTooManyAttributes
	ReasonMalformed         = "malformed"           // ErrMalformed
	ReasonUnknownRequest    = "unknown_request"     // ErrUnknownRequest
	ReasonUnexpectedEOF     = "unexpected_eof"      // io.ErrUnexpectedEOF
	ReasonTimeout           = "timeout"             // request not complete within RequestTimeout
	ReasonReadError         = "read_error"          // connection error inside a request
)

// Server answers policy delegation requests with a Decider's verdicts, in
// the shape of net/http's Server. Bad input or a request not complete in
// RequestTimeout closes the connection without a reply; a panic or fault
// in Decide is answered DUNNO. Fields must not change once Serve is called.
type Server struct {
	// Decider decides every request; required. *req is reused for the
	// connection's next request. ctx ends about RequestTimeout after the
	// request's first byte, or at Close.
	Decider mta.Decider
	Logger  *slog.Logger // nil: slog.Default()
	Metrics mta.Metrics  // may be nil
	// IdleTimeout bounds the wait for a request's first byte,
	// RequestTimeout the rest of it, Decide and the reply (0: defaults);
	// renewed about once a second, so up to a tenth (at most 1 s) early.
	IdleTimeout    time.Duration
	RequestTimeout time.Duration
	// FirstRequestTimeout bounds the wait for the first complete request
	// from the accept; 0: srvconn.DefaultFirstRequestTimeout.
	FirstRequestTimeout time.Duration
	AllowedNetworks     []netip.Prefix // TCP clients allowed; empty: loopback only
	// Budget bounds the connections of all listeners served; one waiting
	// for or reading a request may be closed to make room.
	Budget srvconn.Budget

	initOnce sync.Once
	nextID   atomic.Uint64
	life     *srvconn.Tracker[*conn] // its mutex guards conn.active
	// The timeouts with the defaults applied (init); the first-request
	// timeout at most idle + request.
	idleTimeout, requestTimeout, firstRequestTimeout time.Duration
}

// conn is one accepted connection and what its requests share.
type conn struct {
	rwc      net.Conn
	accepted time.Time
	id       uint64
	log      *slog.Logger
	active   bool // a request is being handled; under Server.life's mutex
	br       *bufio.Reader
	bw       *bufio.Writer
	dec      *Decoder
	dl       deadlines
	req      policy.Request
	tracker  messageTracker
	n        int       // requests answered
	start    time.Time // the current request's first byte
	deciding bool      // Decide is running
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.life = srvconn.New[*conn](ErrServerClosed, "postfix", s.Budget)
		s.idleTimeout = srvconn.OrDefault(s.IdleTimeout, DefaultIdleTimeout)
		s.requestTimeout = srvconn.OrDefault(s.RequestTimeout, DefaultRequestTimeout)
		s.firstRequestTimeout = min(srvconn.OrDefault(s.FirstRequestTimeout, srvconn.DefaultFirstRequestTimeout), s.idleTimeout+s.requestTimeout)
	})
}

func (s *Server) logger() *slog.Logger { return cmp.Or(s.Logger, slog.Default()) }

func (s *Server) metrics() mta.Metrics { return cmp.Or[mta.Metrics](s.Metrics, mta.NoMetrics{}) }

// ConnStats returns the connection budget's state now.
func (s *Server) ConnStats() srvconn.Stats {
	s.init()
	return s.life.Stats()
}

// Serve serves connections on l until it fails or the server stops, backing
// off on temporary accept errors. It closes l and returns ErrServerClosed,
// ErrNoDecider or the accept error.
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
			c := &conn{rwc: rwc, accepted: time.Now(), id: s.nextID.Add(1)}
			c.log = log.With("conn", c.id, "remote", srvconn.RemoteString(rwc))
			return c
		},
		Refused: func(c *conn) { c.log.Warn("connection refused by allow-list") },
		Start:   func(c *conn) { go s.serveConn(c) },
	})
}

// mark records whether c is in a request (for Shutdown) and its Activity
// (for the budget; Busy once a request is read whole, so slow partial
// requests cannot hold the budget); false: c must stop.
func (s *Server) mark(c *conn, active bool, a srvconn.Activity) bool {
	s.life.Lock()
	defer s.life.Unlock()
	if s.life.ClosingLocked(c) || (!active && s.life.ClosedLocked()) {
		return false
	}
	c.active = active
	s.life.MarkLocked(c, a)
	return true
}

// serveConn answers the requests of one connection until it ends.
func (s *Server) serveConn(c *conn) {
	c.br, c.bw = bufio.NewReader(c.rwc), bufio.NewWriterSize(c.rwc, MaxReplyLen+2)
	c.dec = NewDecoder(c.br)
	c.dl = deadlines{idle: s.idleTimeout, request: s.requestTimeout, first: c.accepted.Add(s.firstRequestTimeout)}
	c.tracker = messageTracker{conn: c.id}
	defer func() {
		c.dl.release()
		c.rwc.Close()
		s.life.Remove(c)
	}()
	c.log.Debug("connection opened")
	for s.serveRequests(c) {
	}
}

// serveRequests answers requests until the connection ends. It holds the
// front end's one recover: a panic in Decide is answered DUNNO (logged,
// counted) and it returns true to be called again; elsewhere it closes.
func (s *Server) serveRequests(c *conn) (again bool) {
	m := s.metrics()
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		c.log.Error("panic serving connection", "panic", r, "stack", string(debug.Stack()), "deciding", c.deciding)
		m.Fault(mta.FaultPanic)
		if c.deciding {
			c.deciding = false
			d := policy.Decision{Fault: fmt.Errorf("%w: %v", policy.ErrPanic, r)}
			mta.LogDecision(c.log, nil, &c.req, &d)
			again = s.answer(c, d)
		}
	}()
	for {
		c.dl.waitRequest(c.rwc, time.Now())
		if _, err := c.br.Peek(1); err != nil {
			switch {
			case err == io.EOF:
				c.log.Debug("connection closed by client", "requests", c.n)
			case errors.Is(err, os.ErrDeadlineExceeded) && c.n == 0:
				s.firstRequestTimedOut(c)
			case errors.Is(err, os.ErrDeadlineExceeded):
				c.log.Debug("idle timeout", "requests", c.n, "idle", c.dl.idle)
			case s.life.IsClosed():
				c.log.Debug("connection closed by shutdown", "requests", c.n)
			default:
				c.log.Debug("read error", "requests", c.n, "err", err)
			}
			return false
		}
		if !s.mark(c, true, srvconn.Idle) {
			return false
		}
		c.start = time.Now()
		ctx := c.dl.readRequest(c.rwc, c.br, c.start, s.life.BaseContext())
		if err := c.dec.Decode(&c.req); err != nil {
			if c.n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
				s.firstRequestTimedOut(c)
			}
			if s.life.ClosedForRoom(c) {
				c.log.Debug("connection closed to make room for a new one", "requests", c.n)
				return false
			}
			reason := badInputReason(err)
			c.log.Warn("closing connection without reply", "reason", reason, "err", err, "requests", c.n)
			m.BadInput(reason)
			return false
		}
		if !s.mark(c, true, srvconn.Busy) {
			return false
		}
		c.dl.first = time.Time{}
		c.tracker.fill(&c.req)
		c.req.Received = c.start
		c.deciding = true
		d := s.Decider.Decide(ctx, &c.req)
		c.deciding = false
		mta.LogDecision(c.log, m, &c.req, &d)
		if !s.answer(c, d) {
			return false
		}
	}
}

// firstRequestTimedOut counts and logs a first-request timeout.
func (s *Server) firstRequestTimedOut(c *conn) {
	s.life.CountClosed(srvconn.ReasonFirstRequest)
	c.log.Debug("closing connection: no complete request within the first-request timeout", "timeout", s.firstRequestTimeout)
}

// answer writes the reply d; false: the connection must end.
func (s *Server) answer(c *conn, d policy.Decision) bool {
	c.dl.writeReply(c.rwc, time.Now())
	if err := WriteReply(c.bw, d, c.req.ProtocolState); err != nil {
		c.log.Info("write error", "err", err)
		return false
	}
	s.metrics().Decision(c.req.ProtocolState, d.Action, time.Since(c.start))
	if !s.mark(c, false, srvconn.Idle) {
		return false
	}
	c.n++
	return true
}

// deadlines sets a connection's deadlines and request context without a
// timer per request: moved only when more than slack short, and not for a
// request already buffered whole.
type deadlines struct {
	idle, request time.Duration
	first         time.Time // the first request's deadline; zero once it is read
	read          time.Time // the read deadline set
	readIdle      bool      // read is an idle deadline (else a request's)
	write         time.Time // the write deadline set
	ctx           context.Context
	ctxDeadline   time.Time
	cancel        context.CancelFunc
}

// slack is how far a deadline for timeout d may fall short.
func slack(d time.Duration) time.Duration { return min(d/10, time.Second) }

// waitRequest bounds the wait for the next request's first byte.
func (dl *deadlines) waitRequest(rwc net.Conn, now time.Time) {
	if !dl.first.IsZero() {
		dl.read, dl.readIdle = dl.first, false
		rwc.SetReadDeadline(dl.first)
		return
	}
	want := now.Add(dl.idle)
	if dl.readIdle && dl.read.After(want.Add(-slack(dl.idle))) {
		return
	}
	dl.read, dl.readIdle = want, true
	rwc.SetReadDeadline(want)
}

// readRequest bounds reading the request begun at start and returns its
// decision's context, ending about start + the request timeout.
func (dl *deadlines) readRequest(rwc net.Conn, br *bufio.Reader, start time.Time, base context.Context) context.Context {
	want := start.Add(dl.request)
	if read := want; !requestBuffered(br) {
		if !dl.first.IsZero() && dl.first.Before(read) {
			read = dl.first
		}
		dl.read, dl.readIdle = read, false
		rwc.SetReadDeadline(read)
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

// requestBuffered reports whether br's bytes end with an empty line.
func requestBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.HasSuffix(b, []byte("\n\n")) || bytes.HasSuffix(b, []byte("\n\r\n"))
}

// badInputReasons maps Decode errors to Reason constants.
var badInputReasons = []struct {
	err    error
	reason string
}{{ErrLineTooLong, ReasonLineTooLong}, {ErrTooManyAttributes, ReasonTooManyAttributes}, {ErrMalformed, ReasonMalformed},
	{ErrUnknownRequest, ReasonUnknownRequest}, {io.ErrUnexpectedEOF, ReasonUnexpectedEOF}, {os.ErrDeadlineExceeded, ReasonTimeout}}

// badInputReason maps a Decode error to a Reason constant.
func badInputReason(err error) string {
	for _, r := range badInputReasons {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return ReasonReadError
}

// Shutdown closes the listeners and idle connections, lets requests in
// progress be answered, and returns when every connection is closed (or
// ctx.Err()); ErrServerClosed if already stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	return s.life.Shutdown(ctx, func(c *conn) bool { return !c.active })
}

// Close closes listeners and connections at once; ErrServerClosed if already done.
func (s *Server) Close() error {
	s.init()
	return s.life.Close()
}
