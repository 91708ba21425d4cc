package milter

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Defaults of a Server, against Postfix's smtpd_timeout (300 s),
// milter_command_timeout (30 s) and milter_content_timeout (300 s).
const (
	DefaultReadTimeout       = 330 * time.Second // every read, idle waits included
	DefaultDecideTimeout     = 10 * time.Second  // the ctx of Decide
	DefaultQuarantineTimeout = 120 * time.Second // the ctx of Quarantine calls
	DefaultMaxMessageSize    = 64 << 20          // bytes kept for freezing
	DefaultSpoolThreshold    = 256 << 10         // bytes kept in memory before the spool file
)

// Reasons passed to Metrics.BadInput.
const (
	ReasonEmptyPacket    = "empty_packet"     // ErrEmptyPacket
	ReasonPacketTooLarge = "packet_too_large" // ErrPacketTooLarge
	ReasonTimeout        = "timeout"          // no byte within ReadTimeout
)

// FreezeAdvisor is an optional interface of a Decider: at a message's
// first header byte (req at DATA) MayFreeze says whether a freeze could
// apply; only then is the message kept. It must err towards true: a
// message not kept that must be frozen is temp-failed (ErrNotKept).
type FreezeAdvisor interface {
	MayFreeze(ctx context.Context, req *policy.Request) bool
}

// Quarantine stores frozen messages and records held ones. Called
// concurrently with a ctx of DefaultQuarantineTimeout; m is not touched
// after a call returns.
type Quarantine interface {
	// Freeze stores m.Body and returns once it is durable (fsync'd); the
	// MTA is then told to discard its copy. On error it is temp-failed.
	Freeze(ctx context.Context, m *Message, d policy.Decision) (id string, err error)
	// Hold records a held message (m.Body nil) and returns d, or the
	// defer that replaces a hold it could not record.
	Hold(ctx context.Context, m *Message, d policy.Decision) policy.Decision
}

// Message is one message at the end of the milter transaction.
type Message struct {
	Request    policy.Request // at END-OF-MESSAGE
	Recipients []string       // accepted, in RCPT order
	// Body (Freeze only) reads Size bytes as the MTA would deliver them
	// (CRLF, without the MTA's own topmost Received:).
	Body io.ReadSeeker
	Size int64
}

// Server is the milter front end in the shape of net/http's Server. The
// fields must not change once Serve is called.
type Server struct {
	// Decider decides every RCPT and END-OF-MESSAGE; required. ctx ends at
	// DefaultDecideTimeout or Close.
	Decider     mta.Decider
	Quarantine  Quarantine    // nil: holds unrecorded, freezes temp-failed
	Logger      *slog.Logger  // nil: slog.Default()
	Metrics     mta.Metrics   // may be nil
	ReadTimeout time.Duration // every read and write; 0: DefaultReadTimeout
	// MaxMessageSize bounds the bytes kept for freezing (a larger message
	// that must be frozen gets 452 4.3.4); SpoolThreshold of them stay in
	// memory, the rest in an unlinked file in SpoolDir ("": os.TempDir()).
	// Zero means the defaults.
	MaxMessageSize int64
	SpoolThreshold int64
	SpoolDir       string
	// FirstRequestTimeout bounds the wait for the first complete packet
	// from the accept; 0: srvconn.DefaultFirstRequestTimeout.
	FirstRequestTimeout time.Duration
	AllowedNetworks     []netip.Prefix // TCP clients allowed; empty: loopback only
	// Budget bounds the connections of all listeners served; one waiting
	// for a packet may be closed to make room, between messages first.
	Budget srvconn.Budget

	initOnce sync.Once
	nextID   atomic.Uint64
	instance string                  // prefix of Request.Instance, random per Server
	life     *srvconn.Tracker[*conn] // its mutex guards conn.waiting, inMessage, ended
	// The settings with the defaults applied (init); the first-request
	// timeout at most the read timeout.
	readTimeout, firstRequestTimeout time.Duration
	maxMessageSize, spoolThreshold   int64
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.life = srvconn.New[*conn](ErrServerClosed, "milter", s.Budget)
		s.instance = fmt.Sprintf("milter.%08x", rand.Uint32())
		s.readTimeout = srvconn.OrDefault(s.ReadTimeout, DefaultReadTimeout)
		s.firstRequestTimeout = min(srvconn.OrDefault(s.FirstRequestTimeout, srvconn.DefaultFirstRequestTimeout), s.readTimeout)
		s.maxMessageSize = srvconn.OrDefault(s.MaxMessageSize, DefaultMaxMessageSize)
		s.spoolThreshold = srvconn.OrDefault(s.SpoolThreshold, DefaultSpoolThreshold)
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
	return s.life.Serve(l, srvconn.Accept[*conn]{
		Logger:  s.logger(),
		Allowed: s.AllowedNetworks,
		New:     s.newConn,
		Refused: func(c *conn) { c.log.Warn("connection refused by allow-list") },
		Start:   s.startSession,
	})
}

// startSession serves c with go-milter, in its goroutine.
func (s *Server) startSession(c *conn) {
	c.log.Debug("connection opened")
	lib := &gomilter.Server{
		NewMilter: func() gomilter.Milter { return c.sess },
		Actions:   gomilter.OptAddHeader | gomilter.OptQuarantine,
		Protocol:  gomilter.OptNoUnknown, // go-milter cannot parse SMFIC_UNKNOWN
	}
	_ = lib.Serve(&oneConnListener{c: guardConn{c.rwc, c}})
}

// Shutdown closes the listeners and the connections between messages, lets
// messages in progress reach their end-of-message reply, and returns when
// every connection is closed (or ctx.Err()); ErrServerClosed if stopped.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	return s.life.Shutdown(ctx, func(c *conn) bool { return c.waiting && !c.inMessage })
}

// Close closes listeners and connections at once; ErrServerClosed if already done.
func (s *Server) Close() error {
	s.init()
	return s.life.Close()
}

// conn is one accepted MTA connection.
type conn struct {
	srv  *Server
	rwc  net.Conn
	id   uint64
	log  *slog.Logger
	sess *session

	// Under srv.life's mutex.
	waiting   bool // blocked on the next packet's length header
	inMessage bool // between MAIL and the end-of-message reply or abort
	ended     bool

	// The session goroutine's.
	firstBy    time.Time // deadline of the first packet
	headers    int       // packet headers waited for
	frame      *frameReader
	lastCode   byte               // command byte of the last packet
	mtaActions gomilter.OptAction // offered in SMFIC_OPTNEG
	optneg     bool               // mtaActions is known
	readErr    error
	poisoned   bool // close after the current reply (panic)
}

func (s *Server) newConn(rwc net.Conn) *conn {
	c := &conn{srv: s, rwc: rwc, id: s.nextID.Add(1), firstBy: time.Now().Add(s.firstRequestTimeout)}
	c.log = s.logger().With("conn", c.id, "remote", srvconn.RemoteString(rwc))
	c.sess = &session{c: c}
	c.frame = newFrameReader(deadlineReader{c}, MaxPacketSize, c)
	return c
}

// beforeHeader implements frameHooks: the library waits for a packet.
func (c *conn) beforeHeader() error {
	if c.poisoned {
		return errSessionPoisoned
	}
	c.headers++
	s := c.srv
	s.life.Lock()
	defer s.life.Unlock()
	if c.lastCode == byte(gomilter.CodeEOB) || c.lastCode == byte(gomilter.CodeAbort) {
		c.inMessage = false
	}
	if s.life.ClosedLocked() && !c.inMessage {
		return ErrServerClosed
	}
	c.waiting = true
	if c.inMessage {
		s.life.MarkLocked(c, srvconn.Held)
	} else {
		s.life.MarkLocked(c, srvconn.Idle)
	}
	return nil
}

// afterHeader implements frameHooks.
func (c *conn) afterHeader() {
	s := c.srv
	s.life.Lock()
	c.waiting = false
	s.life.MarkLocked(c, srvconn.Busy)
	s.life.Unlock()
}

// command implements frameHooks.
func (c *conn) command(code byte, data []byte) {
	c.lastCode = code
	switch gomilter.Code(code) {
	case gomilter.CodeMail:
		c.srv.life.Lock()
		c.inMessage = true
		c.srv.life.Unlock()
	case gomilter.CodeOptNeg:
		// version, actions, protocol: the actions the MTA allows.
		if len(data) >= 8 && !c.optneg {
			c.mtaActions = gomilter.OptAction(binary.BigEndian.Uint32(data[4:8]))
			c.optneg = true
		}
	}
}

// canDo reports whether the MTA offered a (yes before option negotiation).
func (c *conn) canDo(a gomilter.OptAction) bool {
	return !c.optneg || c.mtaActions&a != 0
}

// guardConn is the connection as go-milter sees it: reads through the
// framing guard with a deadline on each, writes with a deadline, and Close
// ending the session; the rest is the connection's own.
type guardConn struct {
	net.Conn
	c *conn
}

func (g guardConn) Read(p []byte) (int, error) {
	c := g.c
	n, err := c.frame.Read(p)
	if err != nil {
		if c.readErr == nil {
			c.readErr = err
			c.noteReadError(err)
		}
		err = io.EOF // logged here; go-milter would log it again
	}
	return n, err
}

func (g guardConn) Write(p []byte) (int, error) {
	c := g.c
	c.rwc.SetWriteDeadline(time.Now().Add(c.srv.readTimeout))
	return c.rwc.Write(p)
}

// Close is called by go-milter when the session ends; the connection
// leaves the budget once its session state is released.
func (g guardConn) Close() error {
	c, s := g.c, g.c.srv
	err := c.rwc.Close()
	s.life.Lock()
	first := !c.ended
	c.ended = true
	s.life.Unlock()
	if first {
		c.sess.dropMsg()
		c.log.Debug("connection closed")
		s.life.Remove(c)
	}
	return err
}

// noteReadError logs and counts why a connection stopped reading.
func (c *conn) noteReadError(err error) {
	m := c.srv.metrics()
	switch {
	case errors.Is(err, ErrEmptyPacket):
		c.log.Warn("closing connection: zero-length packet", "err", err)
		m.BadInput(ReasonEmptyPacket)
		c.rwc.Close()
	case errors.Is(err, ErrPacketTooLarge):
		c.log.Warn("closing connection: packet too large", "err", err)
		m.BadInput(ReasonPacketTooLarge)
		c.rwc.Close()
	case errors.Is(err, os.ErrDeadlineExceeded) && c.headers <= 1:
		c.log.Debug("closing connection: no complete packet within the first-request timeout", "timeout", c.srv.firstRequestTimeout)
		c.srv.life.CountClosed(srvconn.ReasonFirstRequest)
		m.BadInput(ReasonTimeout)
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Info("closing connection: read timeout", "timeout", c.srv.readTimeout)
		m.BadInput(ReasonTimeout)
	case errors.Is(err, errSessionPoisoned):
		c.log.Warn("closing connection after a panic")
	case errors.Is(err, ErrServerClosed):
		c.log.Debug("closing connection: server shutting down")
	case err == io.EOF:
		c.log.Debug("connection closed by MTA")
	case c.srv.life.ClosedForRoom(c):
		c.log.Debug("connection closed to make room for a new one")
	case c.srv.life.IsClosed():
		c.log.Debug("connection closed by server", "err", err)
	default:
		c.log.Info("read error", "err", err)
	}
}

// deadlineReader sets the read deadline before every read: the
// first-request deadline until the first packet is read whole.
type deadlineReader struct{ c *conn }

func (d deadlineReader) Read(p []byte) (int, error) {
	if d.c.headers <= 1 {
		d.c.rwc.SetReadDeadline(d.c.firstBy)
	} else {
		d.c.rwc.SetReadDeadline(time.Now().Add(d.c.srv.readTimeout))
	}
	return d.c.rwc.Read(p)
}

// oneConnListener hands one connection to go-milter's Server.Serve.
type oneConnListener struct {
	c    net.Conn
	used bool
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	if l.used {
		return nil, net.ErrClosed
	}
	l.used = true
	return l.c, nil
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return l.c.LocalAddr() }
