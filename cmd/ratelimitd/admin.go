package main

import (
	"bytes"
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
	"sort"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// The admin API is JSON over HTTP on a unix socket (0660, refused in a
// world-writable directory). The CLI uses it while the daemon runs; the
// daemon holds the BoltDB lock, so the CLI cannot open the file then.

// Status is what GET /v1/status returns and `ratelimitd status` prints.
type Status struct {
	Version     string           `json:"version"`
	Started     time.Time        `json:"started"`
	Uptime      string           `json:"uptime"`
	Config      string           `json:"config"`
	Listeners   []string         `json:"listeners"`
	TrackedKeys int              `json:"tracked_keys"`
	Requests    int64            `json:"requests"`
	ByAction    map[string]int64 `json:"decisions"`
	Faults      int64            `json:"faults"`
	BadInput    int64            `json:"bad_input"`
	Limits      []string         `json:"limits"`
	// Stages are the protocol states each front end has asked at since
	// start (the hook layout the daemon learned), with request counts.
	Stages []policy.StageCount `json:"stages"`
	// MessagesInFlight is the number of messages whose per-message
	// bookkeeping is remembered (bounded).
	MessagesInFlight int `json:"messages_in_flight"`
	// Advice lists limits that cannot count as the MTA is hooked up, in
	// plain words with the line to add.
	Advice []string `json:"advice,omitempty"`
	// Notify counts notifications; nil when none are configured.
	Notify *notify.Stats `json:"notify,omitempty"`
	// RestartNeeded lists the settings (TOML keys) of the configuration
	// file that differ from the running ones and take effect only after a
	// restart (listeners, state, quarantine, milter); empty when the
	// running daemon matches its file.
	RestartNeeded []string `json:"restart_needed,omitempty"`
	// Connections are the policy and milter connections against their
	// cap (server.max_connections).
	Connections ConnStatus `json:"connections"`
	// Quarantine: held/frozen counts and the quarantine's faults.
	Quarantine *lifecycle.Health `json:"quarantine,omitempty"`
	// State is the rate state's flush health and key pressure.
	State *StateStatus `json:"state,omitempty"`
	// Store is the Redis backend's state (nil with the local backend).
	Store *redisstore.FailoverStatus `json:"store,omitempty"`
}

// ConnStatus is the connection cap's state in Status: connections open
// now, the cap, and how many were closed at once because it was reached.
type ConnStatus struct {
	Open    int   `json:"open"`
	Max     int   `json:"max"`
	Refused int64 `json:"refused"`
}

// resetResult is the answer to POST /v1/rate/reset.
type resetResult struct {
	Key     string `json:"key"`
	Limit   string `json:"limit,omitempty"`
	Removed int    `json:"removed"`
}

type peerKey struct{}

// adminServer serves the admin API for a running daemon.
type adminServer struct {
	d   *daemon
	log *slog.Logger
}

// listenAdmin creates the admin socket at path with mode 0660. It refuses a
// path whose directory is writable by every user (anyone could replace the
// socket), a path where something other than a socket exists, and a socket
// another daemon answers on (srvconn.ListenUnix); closing the listener
// removes the socket only if it is still ours.
func listenAdmin(path string) (net.Listener, error) {
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

func (a *adminServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", a.status)
	mux.HandleFunc("GET /v1/rate", a.rate)
	mux.HandleFunc("GET /v1/rates", a.rates)
	mux.HandleFunc("POST /v1/rate/reset", a.reset)
	a.d.quarantineRoutes(mux)
	return mux
}

func (a *adminServer) httpServer() *http.Server {
	return &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerName(c))
		},
	}
}

// peerName names the local user at the other end of a unix socket
// (SO_PEERCRED), for the audit log.
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

func (a *adminServer) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.d.status())
}

func (a *adminServer) rate(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	if key == "" {
		fail(w, http.StatusBadRequest, errors.New("key is required"))
		return
	}
	kr, err := a.d.engine.Lookup(r.Context(), time.Now(), key)
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, kr)
}

func (a *adminServer) rates(w http.ResponseWriter, r *http.Request) {
	top, _ := strconv.Atoi(r.URL.Query().Get("top"))
	over := r.URL.Query().Get("over") == "1"
	all, err := a.d.engine.All(r.Context(), time.Now())
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	writeJSON(w, http.StatusOK, topRates(all, top, over))
}

// topRates sorts by closeness to the limit (rate/max, descending) and keeps
// the first top (0 = all), only those refused now when over is set.
func topRates(all []policy.KeyRate, top int, over bool) []policy.KeyRate {
	out := all[:0]
	for _, k := range all {
		if !over || k.Refusing {
			out = append(out, k)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		fi, fj := out[i].Rate/out[i].Max, out[j].Rate/out[j].Max
		if fi != fj {
			return fi > fj
		}
		return out[i].Key < out[j].Key
	})
	if top > 0 && len(out) > top {
		out = out[:top]
	}
	return out
}

func (a *adminServer) reset(w http.ResponseWriter, r *http.Request) {
	key, limit := r.URL.Query().Get("key"), r.URL.Query().Get("limit")
	if key == "" {
		fail(w, http.StatusBadRequest, errors.New("key is required"))
		return
	}
	n, err := a.d.engine.Reset(r.Context(), key, limit)
	if errors.Is(err, policy.ErrUnknownLimit) {
		fail(w, http.StatusNotFound, fmt.Errorf("no limit named %q", limit))
		return
	}
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	a.log.Info("rate reset", "key", key, "limit", limit, "removed", n, "by", who(r))
	a.d.notifier.Notify(notify.Event{Kind: notify.RateReset, Key: key, Limit: limit, Count: n, By: who(r)})
	writeJSON(w, http.StatusOK, resetResult{Key: key, Limit: limit, Removed: n})
}

// adminClient talks to the daemon's admin socket.
type adminClient struct {
	path string
	hc   *http.Client
}

func newAdminClient(path string) *adminClient {
	return &adminClient{path: path, hc: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
}

// errNoDaemon means nothing listens on the admin socket.
var errNoDaemon = errors.New("ratelimitd is not running")

// do sends a request and decodes the JSON answer into out. It returns
// errNoDaemon when the socket is missing or refuses connections.
func (c *adminClient) do(method, path string, body any, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://ratelimitd"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return errNoDaemon
		}
		return fmt.Errorf("admin socket %s: %w", c.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e apiError
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error != "" {
			return errors.New(e.Error)
		}
		return fmt.Errorf("admin socket: %s", resp.Status)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
