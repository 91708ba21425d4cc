package outcome

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/emersion/go-smtp"
)

// NoticeServer is an LMTP server (RFC 2033) for Postfix's postmaster
// notices (notify_classes = bounce, delay; bounce_notice_recipient routed
// to lmtp:inet:HOST:PORT). Each notice's report (ParseReport) gives
// outcomes to the Sink. Every notice is accepted, since a refused one
// would bounce to the postmaster. Safe for concurrent use.
type NoticeServer struct {
	srv  *smtp.Server
	sink *Sink
	log  *slog.Logger
}

// ErrServerClosed is returned by Serve after Close.
var ErrServerClosed = smtp.ErrServerClosed

// NewNoticeServer returns a NoticeServer giving outcomes to sink; log may be nil.
func NewNoticeServer(sink *Sink, log *slog.Logger) *NoticeServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &NoticeServer{sink: sink, log: log}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &noticeSession{s: s}, nil }))
	s.srv.LMTP = true
	s.srv.Domain = "ratelimitd"
	s.srv.ReadTimeout = 5 * time.Minute // Postfix's lmtp_data_done_timeout is 600s, its others 300s
	s.srv.WriteTimeout = 5 * time.Minute
	s.srv.MaxMessageBytes = 10 << 20
	s.srv.MaxRecipients = 100
	s.srv.ErrorLog = slogLogger{log}
	return s
}

// Serve accepts LMTP connections on l until Close; it returns ErrServerClosed then.
func (s *NoticeServer) Serve(l net.Listener) error { return s.srv.Serve(l) }

// Close stops the listeners and closes every connection.
func (s *NoticeServer) Close() error { return s.srv.Close() }

// Shutdown stops the listeners and waits for the connections until ctx is done.
func (s *NoticeServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

type noticeSession struct{ s *NoticeServer }

func (*noticeSession) Reset()                               {}
func (*noticeSession) Logout() error                        { return nil }
func (*noticeSession) Mail(string, *smtp.MailOptions) error { return nil }
func (*noticeSession) Rcpt(string, *smtp.RcptOptions) error { return nil }
func (ns *noticeSession) Data(r io.Reader) error {
	s := ns.s
	rep, err := ParseReport(r)
	io.Copy(io.Discard, r)
	if err != nil {
		if !errors.Is(err, ErrNotReport) {
			s.log.Warn("outcome notice: unreadable report", "err", err)
		}
		return nil
	}
	now := time.Now()
	for _, o := range rep.Outcomes() {
		if err := s.sink.Deliver(context.Background(), now, o); err != nil {
			s.log.Warn("outcome notice: outcome not counted: rate store error", "queue_id", o.QueueID, "err", err)
		}
	}
	return nil
}

// slogLogger is go-smtp's Logger over slog.
type slogLogger struct{ l *slog.Logger }

func (g slogLogger) Printf(format string, v ...any) {
	g.l.Debug("outcome notice server", "msg", fmt.Sprintf(format, v...))
}
func (g slogLogger) Println(v ...any) { g.l.Debug("outcome notice server", "msg", fmt.Sprint(v...)) }
