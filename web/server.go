package web

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// maxFormBytes is the largest form posted.
const maxFormBytes = 64 << 10

// Options configures a Server: Listen ("127.0.0.1:9732"), PEM files
// TLSCert and TLSKey (both or neither), the users file, the proxies whose
// X-Forwarded-For is believed, and the daemon's services (nil Events: no
// history; nil Limits: a domain operator sees no key). Nil Now: time.Now.
type Options struct {
	Listen          string
	TLSCert, TLSKey string
	UsersFile       string
	TrustedProxies  []netip.Prefix

	Services admin.Local
	Now      func() time.Time
}

// Server is the console: New, Start, Reload on SIGHUP, Shutdown. Safe for
// concurrent use.
type Server struct {
	opts     Options
	log      *slog.Logger
	users    atomic.Pointer[Users]
	cert     atomic.Pointer[tls.Certificate]
	sessions *sessions
	throttle *throttle
	verify   chan struct{} // bounds password checks (64 MiB each)
	charts   chan struct{} // bounds chart renders
	pages    map[string]*template.Template

	usersFile atomic.Pointer[os.FileInfo] // as last read (nil: missing)

	mu   sync.Mutex
	http *http.Server
	ln   net.Listener
	done chan struct{}
}

// New checks opts and reads the users and TLS files.
func New(opts Options) (*Server, error) {
	if opts.Services.RateState == nil || opts.Services.Quarantine == nil {
		return nil, errors.New("web: Rates and Quarantine are required")
	}
	if (opts.TLSCert == "") != (opts.TLSKey == "") {
		return nil, errors.New("web: TLSCert and TLSKey go together")
	}
	opts.Services.Events = cmp.Or[admin.Events](opts.Services.Events, noEvents{})
	opts.Services.Logger = cmp.Or(opts.Services.Logger, slog.New(slog.DiscardHandler))
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{
		opts:     opts,
		log:      opts.Services.Logger.With("component", "web"),
		sessions: &sessions{m: map[string]*session{}},
		throttle: &throttle{m: map[string]*failures{}},
		verify:   make(chan struct{}, 2),
		charts:   make(chan struct{}, chartRenders),
		pages:    parsePages(),
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// TLS reports whether the server speaks HTTPS.
func (s *Server) TLS() bool { return s.opts.TLSCert != "" }

// Reload rereads the users file and the TLS certificate, keeping the old
// ones on an error.
func (s *Server) Reload() error {
	if err := s.loadUsers(); err != nil {
		return err
	}
	if s.TLS() {
		c, err := tls.LoadX509KeyPair(s.opts.TLSCert, s.opts.TLSKey)
		if err != nil {
			return fmt.Errorf("web: %w", err)
		}
		s.cert.Store(&c)
	}
	return nil
}

// refreshUsers rereads the users file when it changed, so that `web user
// add|remove` take effect at the next request.
func (s *Server) refreshUsers() {
	if fi, _ := os.Stat(s.opts.UsersFile); sameFile(fi, *s.usersFile.Load()) {
		return
	}
	if err := s.loadUsers(); err != nil {
		s.log.Error("console: users file unreadable; the previous users stay", "err", err)
	}
}

// sameFile reports whether a and b (nil: none) are one file unchanged.
func sameFile(a, b os.FileInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

func (s *Server) loadUsers() error {
	fi, _ := os.Stat(s.opts.UsersFile)
	u, err := LoadUsers(s.opts.UsersFile)
	if err != nil {
		return err
	}
	s.usersFile.Store(&fi)
	s.users.Store(u)
	if u.Len() == 0 {
		s.log.Warn("console has no users: add one with `ratelimitd web user add NAME --role operator`", "users_file", s.opts.UsersFile)
	}
	return nil
}

// Addr is the listener's address (after Start).
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Start listens on Options.Listen and serves in the background.
func (s *Server) Start() error {
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}
	lim := srvconn.NewHTTPLimit(srvconn.HTTPConns()) // as /metrics
	ln = lim.Listener(ln)
	hs := &http.Server{
		ConnState:         lim.ConnState,
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if s.TLS() {
		hs.TLSConfig = &tls.Config{
			MinVersion: tls.VersionTLS12,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return s.cert.Load(), nil
			},
		}
		ln = tls.NewListener(ln, hs.TLSConfig)
	}
	s.mu.Lock()
	s.http, s.ln, s.done = hs, ln, make(chan struct{})
	s.mu.Unlock()
	s.log.Info("console listening", "addr", ln.Addr().String(), "tls", s.TLS())
	go func() {
		defer close(s.done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console stopped", "err", err)
		}
	}()
	return nil
}

// Shutdown stops accepting and lets requests finish until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	hs, done := s.http, s.done
	s.mu.Unlock()
	if hs == nil {
		return nil
	}
	err := hs.Shutdown(ctx)
	if err != nil {
		hs.Close()
	}
	<-done
	return err
}

// noEvents is Events when the event log is off: nothing recorded or found.
type noEvents struct{}

func (noEvents) Query(context.Context, events.Query) ([]events.Event, error)        { return nil, nil }
func (noEvents) Summary(context.Context, events.Query) ([]events.KeySummary, error) { return nil, nil }
func (noEvents) Record(events.Event)                                                {}

// URL is the console's base URL ("" before Start).
func (s *Server) URL() string {
	scheme := "http"
	if s.TLS() {
		scheme = "https"
	}
	a := s.Addr()
	if a == nil {
		return ""
	}
	return scheme + "://" + a.String() + "/"
}
