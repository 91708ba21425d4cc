package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Daemon is the running daemon as the admin API sees it; its methods are
// called concurrently. Notify queues a notification and never blocks.
type Daemon interface {
	Status() Status
	Rates() Rates
	Quarantine() *lifecycle.Service
	Notify(notify.Event)
}

// Server serves the admin API for a running daemon. Set its fields, then
// call HTTPServer; they must not change afterwards.
type Server struct {
	Daemon Daemon
	// Logger receives the audit lines of rate resets.
	Logger *slog.Logger
	// Events is the event log (nil: events off).
	Events *events.Log
}

type peerKey struct{}

// Listen creates the admin socket at path with mode 0660, and its
// directory (0750) if needed. It refuses a world-writable directory and
// whatever srvconn.ListenUnix refuses. Errors begin "admin socket: ".
func Listen(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return nil, fmt.Errorf("admin socket: directory %s is world-writable (mode %v); choose another admin_socket", dir, fi.Mode().Perm())
	}
	l, err := srvconn.ListenUnix(path, 0o660)
	if err != nil {
		return nil, fmt.Errorf("admin socket: %w", err)
	}
	return l, nil
}

// local is the backend the server answers through, acting as r's peer.
func (s *Server) local(r *http.Request) *Local {
	return &Local{Engine: s.Daemon.Rates(), Quarantine: s.Daemon.Quarantine(), Events: s.Events, By: who(r),
		Logger: s.Logger, Notify: s.Daemon.Notify}
}

// Handler returns the API's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.status)
	mux.HandleFunc("GET /v1/rate", s.rate)
	mux.HandleFunc("GET /v1/rates", s.rates)
	mux.HandleFunc("POST /v1/rate/reset", s.reset)
	s.quarantineRoutes(mux)
	s.eventRoutes(mux)
	return mux
}

// HTTPServer returns an http.Server for the API that records each
// connection's peer for the audit log: its listener must hand out the
// *net.UnixConn itself.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerName(c))
		},
	}
}

// peerName names the user at the other end of a unix socket
// (SO_PEERCRED): "alice (uid 1000, pid 42)".
func peerName(c net.Conn) string {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "unknown"
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "unknown"
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED) })
	if cerr != nil || cred == nil {
		return "unknown"
	}
	name := strconv.Itoa(int(cred.Uid))
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return fmt.Sprintf("%s (uid %d, pid %d)", name, cred.Uid, cred.Pid)
}

func who(r *http.Request) string {
	if s, ok := r.Context().Value(peerKey{}).(string); ok {
		return s
	}
	return "unknown"
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

type apiError struct {
	Error string `json:"error"`
}

func fail(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, apiError{Error: err.Error()})
}

// decode reads a JSON request body of at most 1 MiB into v.
func decode(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Daemon.Status())
}

func (s *Server) rate(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		fail(w, http.StatusBadRequest, errors.New("key is required"))
		return
	}
	kr, err := s.local(r).Rate(r.Context(), key)
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, kr)
}

func (s *Server) rates(w http.ResponseWriter, r *http.Request) {
	top, _ := strconv.Atoi(r.URL.Query().Get("top"))
	over := r.URL.Query().Get("over") == "1"
	kr, err := s.local(r).Rates(r.Context(), top, over)
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, kr)
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	key, limit := r.URL.Query().Get("key"), r.URL.Query().Get("limit")
	if key == "" {
		fail(w, http.StatusBadRequest, errors.New("key is required"))
		return
	}
	res, err := s.local(r).Reset(r.Context(), key, limit)
	if errors.Is(err, policy.ErrUnknownLimit) {
		fail(w, http.StatusNotFound, err)
		return
	}
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
