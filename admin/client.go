package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// Client talks to the daemon's admin socket, one HTTP request a call (30 s
// timeout). Safe for concurrent use.
type Client struct {
	path string
	hc   *http.Client
}

// NewClient returns a client of the admin socket at path.
func NewClient(path string) *Client {
	return &Client{path: path, hc: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}},
	}}
}

// ErrNoDaemon means nothing listens on the admin socket.
var ErrNoDaemon = errors.New("ratelimitd is not running")

// call sends body (unless nil) as JSON and decodes the answer. Errors:
// ErrNoDaemon, the API's error text for a status >= 300.
func call[T any](ctx context.Context, c *Client, method, path string, body any) (out T, err error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return out, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://ratelimitd"+path, rd)
	if err != nil {
		return out, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return out, ErrNoDaemon
		}
		return out, fmt.Errorf("admin socket %s: %w", c.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e apiError
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error != "" {
			return out, errors.New(e.Error)
		}
		return out, fmt.Errorf("admin socket: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&out)
	return out, err
}

// Status asks the daemon for its status (GET /v1/status); errors as call's.
func (c *Client) Status(ctx context.Context) (Status, error) {
	return call[Status](ctx, c, "GET", "/v1/status", nil)
}
