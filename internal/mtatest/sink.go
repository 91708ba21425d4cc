package mtatest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
)

// Message is one message a Sink accepted.
type Message struct {
	From string   // envelope sender (MAIL FROM), "" for the null sender
	To   []string // envelope recipients (RCPT TO) in order
	Data []byte   // the message exactly as received, CRLF line ends, dot-stuffing removed
}

// Header returns the first value of header field name, or "".
func (m Message) Header(key string) string {
	msg, err := mail.ReadMessage(bytes.NewReader(m.Data))
	if err != nil {
		return ""
	}
	v := msg.Header.Get(key)
	if d, err := new(mime.WordDecoder).DecodeHeader(v); err == nil {
		return d
	}
	return v
}

// Body returns m after the first empty line, or nil (BodyOf).
func (m Message) Body() []byte { return BodyOf(m.Data) }

// Sink is an SMTP server on 127.0.0.1 keeping every message in memory.
// Safe for concurrent use; closed at t.Cleanup.
type Sink struct {
	ln       net.Listener
	mu       sync.Mutex
	msgs     []Message
	replies  map[Stage]*smtp.SMTPError
	rejected int
	closed   bool
	failQuit bool
	t        testing.TB
}

// StartSink starts a Sink on a free 127.0.0.1 port.
func StartSink(t testing.TB) *Sink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("mtatest: sink listen: %v", err)
	}
	s := &Sink{ln: ln, replies: make(map[Stage]*smtp.SMTPError), t: t}
	srv := smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) {
		return &sinkSession{sink: s}, nil
	}))
	srv.Domain = "sink.mtatest.invalid"
	srv.ReadTimeout = 30 * time.Second
	srv.WriteTimeout = 30 * time.Second
	srv.MaxMessageBytes = 64 << 20
	srv.ErrorLog = log.New(sinkLog{s}, "mtatest: sink: ", 0)
	go func() { _ = srv.Serve(quitListener{ln, s}) }()
	t.Cleanup(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		_ = srv.Close()
	})
	return s
}

// Addr returns the sink's address as "127.0.0.1:PORT".
func (s *Sink) Addr() string { return s.ln.Addr().String() }

// Port returns the sink's TCP port.
func (s *Sink) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// Messages returns a copy of the messages accepted so far, in order.
func (s *Sink) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Count returns the number of messages accepted so far.
func (s *Sink) Count() int { return len(s.Messages()) }

// Rejected returns how many transactions were failed because of SetReply.
func (s *Sink) Rejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// FailQuit(true) makes the sink drop the connection at QUIT, unanswered.
func (s *Sink) FailQuit(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failQuit = on
}

// quitListener wraps the sink's connections for FailQuit.
type quitListener struct {
	net.Listener
	s *Sink
}

func (l quitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &quitConn{Conn: c, s: l.s}, nil
}

type quitConn struct {
	net.Conn
	s *Sink
}

// Read closes the connection at QUIT when FailQuit is on.
func (c *quitConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.mu.Lock()
	fail := c.s.failQuit
	c.s.mu.Unlock()
	if fail && n >= 4 && bytes.EqualFold(p[:4], []byte("QUIT")) {
		c.Conn.Close()
		return 0, io.EOF
	}
	return n, err
}

// Reset forgets the messages accepted so far and the Rejected count.
func (s *Sink) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = nil
	s.rejected = 0
}

// WaitCount waits for at least n messages and returns them; see WaitFor.
func (s *Sink) WaitCount(t testing.TB, n int, timeout time.Duration) []Message {
	t.Helper()
	var msgs []Message
	WaitFor(t, timeout, func() error {
		if msgs = s.Messages(); len(msgs) < n {
			return fmt.Errorf("sink %s has %d messages, want %d", s.Addr(), len(msgs), n)
		}
		return nil
	})
	return msgs
}

// SetReply makes the sink answer later transactions with err at StageMail,
// StageRcpt or StageEndOfData (= StageData); nil accepts again.
func (s *Sink) SetReply(stage Stage, err *smtp.SMTPError) {
	if stage == StageData {
		stage = StageEndOfData
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		delete(s.replies, stage)
		return
	}
	s.replies[stage] = err
}

func (s *Sink) reply(stage Stage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err, ok := s.replies[stage]; ok {
		s.rejected++
		return err
	}
	return nil
}

type sinkSession struct {
	sink *Sink
	from string
	to   []string
}

func (ss *sinkSession) Reset() {
	ss.from = ""
	ss.to = nil
}

func (ss *sinkSession) Logout() error { return nil }

func (ss *sinkSession) Mail(from string, _ *smtp.MailOptions) error {
	if err := ss.sink.reply(StageMail); err != nil {
		return err
	}
	ss.from = from
	ss.to = nil
	return nil
}

func (ss *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	if err := ss.sink.reply(StageRcpt); err != nil {
		return err
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *sinkSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		var smtpErr *smtp.SMTPError
		if errors.As(err, &smtpErr) {
			return smtpErr
		}
		return fmt.Errorf("mtatest: sink read data: %w", err)
	}
	if err := ss.sink.reply(StageEndOfData); err != nil {
		return err
	}
	ss.sink.mu.Lock()
	ss.sink.msgs = append(ss.sink.msgs, Message{From: ss.from, To: append([]string(nil), ss.to...), Data: data})
	ss.sink.mu.Unlock()
	return nil
}

// sinkLog sends go-smtp's errors to the test log while the test runs.
type sinkLog struct{ s *Sink }

func (l sinkLog) Write(p []byte) (int, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.s.closed {
		l.s.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// BodyOf returns msg's body (after the first empty line) with CRLF line
// ends, or nil: comparable between a message sent and one received.
func BodyOf(msg []byte) []byte {
	msg = bytes.ReplaceAll(bytes.ReplaceAll(msg, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))
	if i := bytes.Index(msg, []byte("\r\n\r\n")); i >= 0 {
		return msg[i+4:]
	}
	return nil
}
