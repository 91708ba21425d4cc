package outcome

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
)

// EximRequestType is the request attribute of an Exim delivery event.
const EximRequestType = "exim_outcome"

// Bounds on an Exim event request.
const (
	maxEximLine  = 2048
	maxEximAttrs = 16
	eximDeadline = 10 * time.Second
)

// Errors of ParseEximEvent; ErrEximIgnored is a well-formed event that is
// not an outcome (another event, a success, no recipient).
var (
	ErrEximMalformed = errors.New("outcome: malformed Exim event request")
	ErrEximIgnored   = errors.New("outcome: Exim event is not an outcome")
)

// ParseEximEvent reads one request of Exim's transport event_action
// (docs/exim.md; Exim specification, "Event actions"): name=value lines
// up to an empty line or the end of input, with request=exim_outcome,
// event, queue_id, recipient and data (the error). msg:fail:delivery and
// msg:fail:internal are bounces (unknown recipients by the error's
// enhanced code), msg:defer and msg:rcpt:defer deferrals. Errors wrap
// ErrEximMalformed or ErrEximIgnored.
func ParseEximEvent(r *bufio.Reader) (Outcome, error) {
	attrs := map[string]string{}
	for n := 0; ; n++ {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > maxEximLine {
			return Outcome{}, fmt.Errorf("%w: line longer than %d bytes", ErrEximMalformed, maxEximLine)
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(line) == 0 {
			if err != nil && n == 0 {
				return Outcome{}, fmt.Errorf("%w: empty request", ErrEximMalformed)
			}
			break
		}
		if n >= maxEximAttrs {
			return Outcome{}, fmt.Errorf("%w: more than %d attributes", ErrEximMalformed, maxEximAttrs)
		}
		name, value, ok := bytes.Cut(line, []byte("="))
		if !ok || len(name) == 0 || bytes.IndexByte(line, 0) >= 0 {
			return Outcome{}, fmt.Errorf("%w: line %d: not name=value", ErrEximMalformed, n+1)
		}
		if _, dup := attrs[string(name)]; !dup {
			attrs[string(name)] = string(value)
		}
		if err != nil {
			break // readsocket shuts down its side
		}
	}
	if attrs["request"] != EximRequestType {
		return Outcome{}, fmt.Errorf("%w: request %.40q is not %s", ErrEximMalformed, attrs["request"], EximRequestType)
	}
	o := Outcome{QueueID: attrs["queue_id"], Recipient: strings.TrimSpace(attrs["recipient"])}
	if !maillog.ValidQueueID(o.QueueID) {
		return Outcome{}, fmt.Errorf("%w: queue_id %.40q", ErrEximMalformed, o.QueueID)
	}
	if o.Recipient == "" || o.Recipient == "@" {
		return Outcome{}, fmt.Errorf("%w: no recipient", ErrEximIgnored)
	}
	switch attrs["event"] {
	case "msg:fail:delivery", "msg:fail:internal":
		o.Kind, _ = policy.ClassifyDSN(maillog.RefineDSN("5.0.0", attrs["data"]))
	case "msg:defer", "msg:rcpt:defer":
		o.Kind = policy.OutcomeDeferral
	default:
		return Outcome{}, fmt.Errorf("%w: event %.40q", ErrEximIgnored, attrs["event"])
	}
	return o, nil
}

// EximServer receives Exim's delivery events (ParseEximEvent), one
// request per connection as ${readsocket} sends it, gives them to a Sink,
// answers "action=DUNNO" and closes; garbage is closed unanswered. Every
// connection has a deadline; a panic closes its connection. Safe for
// concurrent use.
type EximServer struct {
	sink *Sink
	log  *slog.Logger
	life *srvconn.Tracker[net.Conn]
}

// NewEximServer returns an EximServer giving outcomes to sink; log may be nil.
func NewEximServer(sink *Sink, log *slog.Logger) *EximServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &EximServer{sink: sink, log: log, life: srvconn.New[net.Conn](ErrServerClosed, "outcome exim", srvconn.Budget{})}
}

// Serve accepts connections on l (TCP from loopback, unix sockets) until
// Close; it returns ErrServerClosed then.
func (s *EximServer) Serve(l net.Listener) error {
	return s.life.Serve(l, srvconn.Accept[net.Conn]{Logger: s.log, New: func(c net.Conn) net.Conn { return c },
		Refused: func(net.Conn) {}, Start: func(c net.Conn) { go s.serveConn(c) }})
}

func (s *EximServer) serveConn(c net.Conn) {
	defer s.life.Remove(c)
	defer c.Close()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("outcome exim: panic while reading an event", "panic", p)
		}
	}()
	c.SetDeadline(time.Now().Add(eximDeadline))
	o, err := ParseEximEvent(bufio.NewReaderSize(c, maxEximLine+2))
	if errors.Is(err, ErrEximMalformed) {
		return
	}
	if err == nil {
		if err := s.sink.Deliver(context.Background(), time.Now(), o); err != nil {
			s.log.Warn("outcome exim: outcome not counted: rate store error", "queue_id", o.QueueID, "err", err)
		}
	}
	c.Write([]byte("action=DUNNO\n\n"))
}

// Close stops the listeners and waits for the connections (each within
// its deadline).
func (s *EximServer) Close() error {
	return s.life.Shutdown(context.Background(), func(net.Conn) bool { return false })
}
