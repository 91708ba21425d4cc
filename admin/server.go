package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

type peerKey struct{}

// Listen creates the admin socket at path (0660; directory 0750), refusing
// a world-writable directory. Errors begin "admin socket: ".
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

// as is l acting as the request's peer.
func (l Local) as(r *http.Request) *Local {
	l.By = "unknown"
	if p, ok := r.Context().Value(peerKey{}).(string); ok {
		l.By = p
	}
	return &l
}

type badRequest struct{ error }

func statusOf(err error) int {
	var br badRequest
	switch {
	case errors.As(err, &br):
		return http.StatusBadRequest
	case errors.Is(err, policy.ErrUnknownLimit), errors.Is(err, quarantine.ErrNotFound), errors.Is(err, errNoEvents):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// handler returns the API's routes (package doc).
func (l Local) handler() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, fn func(r *http.Request, l *Local) (any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			v, err := fn(r, l.as(r))
			if err != nil {
				writeJSON(w, statusOf(err), apiError{Error: err.Error()})
				return
			}
			writeJSON(w, http.StatusOK, v)
		})
	}
	handle("GET /v1/status", func(*http.Request, *Local) (any, error) { return l.Status(), nil })
	for path, reset := range map[string]bool{"GET /v1/rate": false, "POST /v1/rate/reset": true} {
		handle(path, func(r *http.Request, l *Local) (any, error) {
			switch q := r.URL.Query(); {
			case q.Get("key") == "":
				return nil, badRequest{errors.New("key is required")}
			case reset:
				return l.Reset(r.Context(), q.Get("key"), q.Get("limit"))
			default:
				return l.Rate(r.Context(), q.Get("key"))
			}
		})
	}
	handle("GET /v1/rates", func(r *http.Request, l *Local) (any, error) {
		top, _ := strconv.Atoi(r.URL.Query().Get("top"))
		return l.Rates(r.Context(), top, r.URL.Query().Get("over") == "1")
	})
	handle("GET /v1/quarantine", func(r *http.Request, l *Local) (any, error) {
		lq, err := ParseListQuery(r.URL.Query())
		if err != nil {
			return nil, badRequest{err}
		}
		return l.List(r.Context(), lq)
	})
	handle("GET /v1/quarantine/{id}", func(r *http.Request, l *Local) (any, error) {
		return l.Show(r.Context(), r.PathValue("id"), r.URL.Query().Get("raw") == "1")
	})
	act := func(thaw bool) func(*http.Request, *Local) (any, error) {
		return func(r *http.Request, l *Local) (any, error) {
			var sel lifecycle.Selection
			if err := decode(r, &sel); err != nil {
				return nil, badRequest{err}
			}
			out, err := l.Act(r.Context(), thaw, sel)
			if err != nil {
				return nil, badRequest{err}
			}
			return out, nil
		}
	}
	handle("POST /v1/quarantine/thaw", act(true))
	handle("POST /v1/quarantine/delete", act(false))
	handle("POST /v1/quarantine/suspend", func(r *http.Request, l *Local) (any, error) {
		var req SuspendRequest
		if err := decode(r, &req); err != nil || req.Key == "" {
			return nil, badRequest{errors.New("name a key")}
		}
		return l.Suspend(r.Context(), req.Key, req.Resume)
	})
	for path, summary := range map[string]bool{"GET /v1/events": false, "GET /v1/events/summary": true} {
		handle(path, func(r *http.Request, l *Local) (any, error) {
			q, err := ParseEventQuery(r.URL.Query(), time.Now())
			switch {
			case err != nil:
				return nil, badRequest{err}
			case summary:
				return l.EventSummary(r.Context(), q)
			}
			return l.EventList(r.Context(), q)
		})
	}
	return mux
}

// HTTPServer returns an http.Server for the admin API on l, acting as
// each peer; its listener must hand out *net.UnixConn.
func (l Local) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           l.handler(),
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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

type apiError struct {
	Error string `json:"error"`
}

// decode reads a JSON request body of at most 1 MiB into v.
func decode(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v)
}
