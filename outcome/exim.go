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
	"sync"
	"sync/atomic"
	"time"

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

// Errors of ParseEximEvent.
var (
	ErrEximMalformed = errors.New("outcome: malformed Exim event request")
	// ErrEximIgnored: a well-formed event that is not an outcome (another
	// event name, a success, no recipient).
	ErrEximIgnored = errors.New("outcome: Exim event is not an outcome")
)

// ParseEximEvent reads one request of Exim's transport event_action
// (docs/exim.md; Exim specification, "Event actions"), in the policy
// delegation protocol's form: name=value lines ending with an empty line
// or the end of input, with request=exim_outcome, event=$event_name,
// queue_id=$message_exim_id, recipient=$local_part@$domain and
// data=$event_data (the error). msg:fail:delivery and msg:fail:internal
// are bounces (unknown recipients when the error's enhanced status code
// says so), msg:defer and msg:rcpt:defer deferrals. Errors wrap
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
			break // end of input ends the request, as Exim's readsocket shuts down its side
		}
	}
	if attrs["request"] != EximRequestType {
		return Outcome{}, fmt.Errorf("%w: request %.40q is not %s", ErrEximMalformed, attrs["request"], EximRequestType)
	}
	o := Outcome{QueueID: attrs["queue_id"], Recipient: strings.TrimSpace(attrs["recipient"])}
	if !ValidQueueID(o.QueueID) {
		return Outcome{}, fmt.Errorf("%w: queue_id %.40q", ErrEximMalformed, o.QueueID)
	}
	if o.Recipient == "" || o.Recipient == "@" {
		return Outcome{}, fmt.Errorf("%w: no recipient", ErrEximIgnored)
	}
	code := enhancedRE.FindString(attrs["data"])
	switch attrs["event"] {
	case "msg:fail:delivery", "msg:fail:internal":
		o.Kind = policy.OutcomeBounce
		if k, ok := policy.ClassifyDSN(code); ok && k == policy.OutcomeUnknownRcpt {
			o.Kind = k
		}
	case "msg:defer", "msg:rcpt:defer":
		o.Kind = policy.OutcomeDeferral
	default:
		return Outcome{}, fmt.Errorf("%w: event %.40q", ErrEximIgnored, attrs["event"])
	}
	return o, nil
}

// EximServer receives Exim's delivery events (ParseEximEvent), one
// request per connection as ${readsocket} sends it, and gives them to a
// Sink; it answers "action=DUNNO" and closes. Garbage closes the
// connection without a reply. Every connection has a deadline; a panic
// closes its connection. Safe for concurrent use.
type EximServer struct {
	sink *Sink
	log  *slog.Logger
	// Events counts the requests read, Malformed those closed unanswered.
	Events, Malformed atomic.Int64

	mu     sync.Mutex
	ls     []net.Listener
	closed bool
	wg     sync.WaitGroup
}

// NewEximServer returns an EximServer giving outcomes to sink; log may be nil.
func NewEximServer(sink *Sink, log *slog.Logger) *EximServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &EximServer{sink: sink, log: log}
}

// Serve accepts connections on l until Close; it returns ErrServerClosed then.
func (s *EximServer) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.ls = append(s.ls, l)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

func (s *EximServer) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer c.Close()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("outcome exim: panic while reading an event", "panic", p)
		}
	}()
	c.SetDeadline(time.Now().Add(eximDeadline))
	s.Events.Add(1)
	o, err := ParseEximEvent(bufio.NewReaderSize(c, maxEximLine+2))
	if errors.Is(err, ErrEximMalformed) {
		s.Malformed.Add(1)
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
	s.mu.Lock()
	s.closed = true
	for _, l := range s.ls {
		l.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}
