package milter

import (
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

// Defaults of a Server.
const (
	// DefaultReadTimeout bounds every read from the MTA, waiting for the
	// next command included. It is longer than Postfix's smtpd_timeout
	// (300 s), during which the milter connection sits idle while Postfix
	// waits for its SMTP client, so that Postfix, not the server, normally
	// ends a quiet connection.
	DefaultReadTimeout = 330 * time.Second
	// DefaultDecideTimeout is the deadline of the ctx passed to
	// Decider.Decide: far below Postfix's milter_command_timeout (30 s).
	DefaultDecideTimeout = 10 * time.Second
	// DefaultQuarantineTimeout is the deadline of the ctx passed to
	// Quarantine.Freeze and Quarantine.Hold: below Postfix's
	// milter_content_timeout (300 s), which covers the end-of-message
	// reply.
	DefaultQuarantineTimeout = 120 * time.Second
	// DefaultMaxMessageSize is the largest message, in bytes, the server
	// keeps for freezing: 64 MiB.
	DefaultMaxMessageSize = 64 << 20
	// DefaultSpoolThreshold is how many bytes of a message kept for
	// freezing stay in memory before the message moves to a spool file:
	// 256 KiB.
	DefaultSpoolThreshold = 256 << 10
)

// Reasons passed to Metrics.BadInput and logged when a connection is closed
// without a reply because of its input.
const (
	ReasonEmptyPacket    = "empty_packet"     // ErrEmptyPacket
	ReasonPacketTooLarge = "packet_too_large" // ErrPacketTooLarge
	ReasonTimeout        = "timeout"          // no byte within ReadTimeout
)

// FreezeAdvisor is an optional interface of a Decider that saves the
// Server from keeping messages no limit could freeze. When a message's
// header begins (every recipient known), the Server asks MayFreeze once;
// only if it reports true (or the Decider does not implement
// FreezeAdvisor, or a RCPT decision already was Freeze) is the message
// kept, header and body, for Quarantine.Freeze.
//
// req has ProtocolState DATA, the connection's client and HELO name, the
// sender, SASL login, queue ID if known, RecipientCount and, with exactly
// one recipient, Recipient. MayFreeze must err towards true: a message
// that was not kept and is then decided Freeze is temp-failed (451 4.3.0,
// ErrNotKept), never discarded. It is called concurrently and must be safe
// for concurrent use; ctx carries the DecideTimeout deadline.
type FreezeAdvisor interface {
	MayFreeze(ctx context.Context, req *policy.Request) bool
}

// Quarantine stores frozen messages durably and records held ones. The
// daemon implements it with package quarantine's BoltDB store.
//
// Methods are called concurrently from the connection goroutines and must
// be safe for concurrent use. ctx carries a deadline
// (DefaultQuarantineTimeout) and is cancelled by Server.Close. The Server
// does not touch m after a call returns, so an implementation may keep it.
// d is the decision that applies (its Limit, Key, Rate, Max, Text and
// Reason describe why).
type Quarantine interface {
	// Freeze stores the whole message read from m.Body and must return
	// only after
	// it is durably committed (fsync'd): the Server then tells the MTA to
	// discard its copy. An error means the message is temp-failed
	// (451 4.3.0), never discarded. id is the quarantine entry's ID, for
	// the log.
	Freeze(ctx context.Context, m *Message, d policy.Decision) (id string, err error)
	// Hold records a message the MTA keeps in its own hold queue (queue
	// ID in m.Request.QueueID; m.Body is nil) and returns the decision to
	// apply: d, or the defer that replaces a hold it could not record
	// (logged and counted by the implementation).
	Hold(ctx context.Context, m *Message, d policy.Decision) policy.Decision
}

// Message is one message at the end of the milter transaction, as given to
// Quarantine.
type Message struct {
	// Request is the END-OF-MESSAGE request: client, HELO name, SASL
	// login, sender, queue ID, size and recipient count (Recipient is set
	// only when there is exactly one recipient).
	Request policy.Request
	// Recipients lists the envelope recipients the server accepted, in
	// RCPT order.
	Recipients []string
	// Body reads the message as the MTA would deliver it: the header fields
	// as received, each "Name: value" ending in CRLF with its continuation
	// lines preserved (CRLF-terminated), an empty line, and the body bytes
	// exactly as received. Two details follow from the milter protocol:
	// the MTA's own topmost Received: field is not shown to milters by
	// Postfix and is absent, and a field written without a space after the
	// colon gains one (the MTA strips one space, Postfix and Sendmail
	// alike). Body is set for Freeze only (nil for Hold): Size bytes,
	// from memory or streamed from the spool file, positioned at the
	// start (Seek to read it again).
	Body io.ReadSeeker
	Size int64
}

// Metrics receives a Server's counts: those of every front end
// (mta.Metrics; Fault kinds are mta.FaultPanic, mta.FaultDecision,
// mta.FaultHoldRecord, mta.FaultFreeze, mta.FaultNoQuarantineAction and
// mta.FaultSpool) and the decisions and messages. Methods are called from
// the accept and connection goroutines, concurrently: they must be safe
// for concurrent use and must not block.
type Metrics interface {
	mta.Metrics
	// Decision is called for every Decide, with the protocol state
	// (policy.StateRcpt or policy.StateEndOfMessage), the decided action
	// and how long Decide took.
	Decision(state string, action policy.Action, elapsed time.Duration)
	// Message is called once per message that reached its end, with the
	// action applied (the strictest of the RCPT and END-OF-MESSAGE
	// decisions; Defer also when a freeze failed).
	Message(action policy.Action)
}

// Server is a milter (Sendmail 8 mail filter protocol) front end for
// ratelimitd, for Postfix smtpd_milters and Sendmail INPUT_MAIL_FILTER, in
// the shape of net/http's Server: configure the exported fields, call Serve
// for each listener, and Shutdown or Close to stop. The protocol itself is
// spoken by github.com/emersion/go-milter; see the package documentation
// for what happens at each stage.
//
// The exported fields must not be changed once Serve has been called. The
// methods are safe for concurrent use.
type Server struct {
	// Decider decides every RCPT and END-OF-MESSAGE (and, if it is a
	// FreezeAdvisor, whether a message is kept for freezing). Required.
	// ctx carries a deadline (DecideTimeout) and is cancelled by Close.
	// req is a fresh value for every call; the Decider may keep it.
	// req.Received is the time of the call. A panic that escapes Decide
	// is recovered: the command is temp-failed and the connection closed.
	Decider mta.Decider
	// Quarantine freezes and records held messages. If nil, holds are
	// not recorded and freezes are temp-failed (451 4.3.0).
	Quarantine Quarantine
	// Logger receives the connection log; every line carries the
	// connection id ("conn"). Non-Pass decisions are logged at Info,
	// faults at Warn or Error, the rest at Debug. Nil means
	// slog.Default().
	Logger *slog.Logger
	// Metrics, if non-nil, receives the server's counts.
	Metrics Metrics
	// ReadTimeout bounds every read from the MTA, including the wait for
	// its next command, and every write to it. A connection that stays
	// silent longer is closed. Zero means DefaultReadTimeout (330 s).
	ReadTimeout time.Duration
	// DecideTimeout is the deadline of each Decide's ctx. Zero means
	// DefaultDecideTimeout (10 s).
	DecideTimeout time.Duration
	// MaxMessageSize is how many bytes of each message (header and body)
	// are kept for freezing. A larger message is counted in full
	// (Request.Size) but no longer kept; if it must be frozen it is
	// temp-failed with 452 4.3.4. Zero or negative means
	// DefaultMaxMessageSize (64 MiB).
	//
	// Only messages a freeze could apply to are kept (see FreezeAdvisor):
	// the first SpoolThreshold bytes in memory, the rest in an unlinked
	// temporary file in SpoolDir, so memory per message in progress is
	// bounded by SpoolThreshold; a message is read back into memory whole
	// only when it is frozen.
	MaxMessageSize int64
	// SpoolThreshold is how many bytes of a kept message stay in memory
	// before it moves to a file in SpoolDir. Zero or negative means
	// DefaultSpoolThreshold (256 KiB).
	SpoolThreshold int64
	// SpoolDir is the directory of the spool files ("" means
	// os.TempDir()); the daemon uses its state directory. Files are
	// unlinked as soon as they are created, so a crash leaves none.
	SpoolDir string
	// AllowedNetworks lists the client networks a TCP connection may come
	// from; a connection from elsewhere is closed unread. Empty means
	// loopback only (127.0.0.0/8, ::1). Unix-socket connections are not
	// checked (the socket's file mode controls them).
	AllowedNetworks []netip.Prefix

	initOnce sync.Once
	nextID   atomic.Uint64
	instance string // prefix of Request.Instance, random per Server
	// life tracks the listeners and connections; its mutex guards the
	// connections' waiting, inMessage and ended.
	life *srvconn.Tracker[*conn]
}

func (s *Server) init() {
	s.initOnce.Do(func() {
		s.life = srvconn.New[*conn](ErrServerClosed, "milter")
		s.instance = fmt.Sprintf("milter.%08x", rand.Uint32())
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

func (s *Server) readTimeout() time.Duration {
	if s.ReadTimeout > 0 {
		return s.ReadTimeout
	}
	return DefaultReadTimeout
}

func (s *Server) decideTimeout() time.Duration {
	if s.DecideTimeout > 0 {
		return s.DecideTimeout
	}
	return DefaultDecideTimeout
}

func (s *Server) spoolThreshold() int64 {
	if s.SpoolThreshold > 0 {
		return s.SpoolThreshold
	}
	return DefaultSpoolThreshold
}

func (s *Server) maxMessageSize() int64 {
	if s.MaxMessageSize > 0 {
		return s.MaxMessageSize
	}
	return DefaultMaxMessageSize
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
	return s.life.Serve(l, srvconn.Accept[*conn]{
		Logger:  s.logger(),
		Allowed: s.AllowedNetworks,
		New:     s.newConn,
		Refused: func(c *conn) {
			s.metrics().Conn(false)
			c.log.Warn("connection refused by allow-list")
		},
		Start: func(c *conn) {
			s.metrics().Conn(true)
			c.log.Debug("connection opened")
			s.startSession(c)
		},
	})
}

// startSession hands c to go-milter, which runs the protocol on its own
// goroutine and calls c.sess for every event. A go-milter Server is made per
// connection so that its NewMilter knows the connection: go-milter calls
// NewMilter again after every final reply, and it must return the same
// connection's session.
func (s *Server) startSession(c *conn) {
	lib := &gomilter.Server{
		NewMilter: func() gomilter.Milter { return c.sess },
		// The only modifications ever sent: AddHeader (Warn) and
		// quarantine (Hold). Both are milter protocol 2 actions.
		Actions: gomilter.OptAddHeader | gomilter.OptQuarantine,
		// go-milter does not know SMFIC_UNKNOWN and would close the
		// connection on it.
		Protocol: gomilter.OptNoUnknown,
	}
	// Serve accepts c, starts the session goroutine and returns at the
	// listener's second Accept.
	_ = lib.Serve(&oneConnListener{c: c.guard()})
}

// Shutdown shuts the server down gracefully: it closes the listeners (Serve
// returns ErrServerClosed) and the connections that are between messages,
// lets every message in progress run to its end-of-message reply, closing
// its connection afterwards, and returns when all connections are closed.
// The MTA applies its milter_default_action to the rest of an SMTP session
// whose milter connection was closed (Postfix default: tempfail). If ctx
// ends first, Shutdown returns ctx.Err() and leaves the remaining
// connections to Close. It returns ErrServerClosed if the server was already
// shut down or closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.init()
	return s.life.Shutdown(ctx, func(c *conn) bool { return c.waiting && !c.inMessage })
}

// Close closes the listeners and every connection at once, including those
// with a message in progress (whose Decide or Quarantine call sees its ctx
// cancelled), without waiting for them. For a graceful stop use Shutdown;
// Close after a Shutdown that ran out of time stops what is left. It
// returns ErrServerClosed if Close was already called, else the first error
// from closing a listener.
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
	ended     bool // the session has ended

	// Used by the session goroutine only.
	frame      *frameReader
	lastCode   byte               // command byte of the last packet
	mtaActions gomilter.OptAction // actions the MTA offered (SMFIC_OPTNEG)
	optneg     bool               // mtaActions is known
	readErr    error              // why reading stopped
	poisoned   bool               // close after the current reply (panic)
}

func (s *Server) newConn(rwc net.Conn) *conn {
	c := &conn{srv: s, rwc: rwc, id: s.nextID.Add(1)}
	c.log = s.logger().With("conn", c.id, "remote", srvconn.RemoteString(rwc))
	c.sess = &session{c: c}
	c.frame = newFrameReader(deadlineReader{c}, MaxPacketSize, c)
	return c
}

// beforeHeader implements frameHooks: the previous packet has been answered
// and the library waits for the next one.
func (c *conn) beforeHeader() error {
	if c.poisoned {
		return errSessionPoisoned
	}
	s := c.srv
	s.life.Lock()
	defer s.life.Unlock()
	switch c.lastCode {
	case byte(gomilter.CodeEOB), byte(gomilter.CodeAbort):
		// The end-of-message reply has been written (go-milter writes
		// it before reading on), or the message was aborted.
		c.inMessage = false
	}
	if s.life.ClosedLocked() && !c.inMessage {
		return ErrServerClosed
	}
	c.waiting = true
	return nil
}

// afterHeader implements frameHooks.
func (c *conn) afterHeader() {
	s := c.srv
	s.life.Lock()
	c.waiting = false
	s.life.Unlock()
}

// command implements frameHooks.
func (c *conn) command(code byte, data []byte) {
	c.lastCode = code
	switch gomilter.Code(code) {
	case gomilter.CodeMail:
		s := c.srv
		s.life.Lock()
		c.inMessage = true
		s.life.Unlock()
	case gomilter.CodeOptNeg:
		// version, actions, protocol: the actions the MTA allows.
		if len(data) >= 8 && !c.optneg {
			c.mtaActions = gomilter.OptAction(binary.BigEndian.Uint32(data[4:8]))
			c.optneg = true
		}
	}
}

// canDo reports whether the MTA offered action a. Before (or without) an
// option negotiation seen in full, it assumes yes.
func (c *conn) canDo(a gomilter.OptAction) bool {
	return !c.optneg || c.mtaActions&a != 0
}

// guard returns the net.Conn given to go-milter: reads go through the
// framing guard with a deadline on each, writes get a deadline, and Close
// marks the end of the session.
func (c *conn) guard() net.Conn { return guardConn{c} }

// guardConn is the connection as go-milter sees it.
type guardConn struct{ c *conn }

func (g guardConn) Read(p []byte) (int, error) {
	c := g.c
	n, err := c.frame.Read(p)
	if err != nil && c.readErr == nil {
		c.readErr = err
		c.noteReadError(err)
	}
	if err != nil {
		// go-milter logs every error but io.EOF on the standard logger;
		// the reason has been logged here, with the connection id.
		err = io.EOF
	}
	return n, err
}

func (g guardConn) Write(p []byte) (int, error) {
	c := g.c
	c.rwc.SetWriteDeadline(time.Now().Add(c.srv.readTimeout()))
	return c.rwc.Write(p)
}

// Close is called by go-milter when the session ends.
func (g guardConn) Close() error {
	c := g.c
	err := c.rwc.Close()
	s := c.srv
	s.life.Lock()
	first := !c.ended
	c.ended = true
	s.life.RemoveLocked(c)
	s.life.Unlock()
	if first {
		c.sess.end()
		c.log.Debug("connection closed")
		s.metrics().ConnDone()
	}
	return err
}

func (g guardConn) LocalAddr() net.Addr                { return g.c.rwc.LocalAddr() }
func (g guardConn) RemoteAddr() net.Addr               { return g.c.rwc.RemoteAddr() }
func (g guardConn) SetDeadline(t time.Time) error      { return g.c.rwc.SetDeadline(t) }
func (g guardConn) SetReadDeadline(t time.Time) error  { return g.c.rwc.SetReadDeadline(t) }
func (g guardConn) SetWriteDeadline(t time.Time) error { return g.c.rwc.SetWriteDeadline(t) }

// noteReadError logs and counts why a connection stopped reading, and
// closes it at once for bad input.
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
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.log.Info("closing connection: read timeout", "timeout", c.srv.readTimeout())
		m.BadInput(ReasonTimeout)
	case errors.Is(err, errSessionPoisoned):
		c.log.Warn("closing connection after a panic")
	case errors.Is(err, ErrServerClosed):
		c.log.Debug("closing connection: server shutting down")
	case err == io.EOF:
		c.log.Debug("connection closed by MTA")
	default:
		if c.srv.life.IsClosed() {
			c.log.Debug("connection closed by server", "err", err)
		} else {
			c.log.Info("read error", "err", err)
		}
	}
}

// deadlineReader sets the read deadline before every read.
type deadlineReader struct{ c *conn }

func (d deadlineReader) Read(p []byte) (int, error) {
	d.c.rwc.SetReadDeadline(time.Now().Add(d.c.srv.readTimeout()))
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

type noMetrics struct{}

func (noMetrics) Conn(bool)                                     {}
func (noMetrics) ConnDone()                                     {}
func (noMetrics) Decision(string, policy.Action, time.Duration) {}
func (noMetrics) Message(policy.Action)                         {}
func (noMetrics) BadInput(string)                               {}
func (noMetrics) Fault(string)                                  {}
