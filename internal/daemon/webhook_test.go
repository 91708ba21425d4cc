package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// webhook is an HTTP server on 127.0.0.1 that keeps the JSON object of
// every request's body, closed at t.Cleanup. Safe for concurrent use.
type webhook struct {
	URL    string
	mu     sync.Mutex
	events []map[string]any
}

// startWebhook starts a webhook; a body that is no JSON object fails t.
func startWebhook(t testing.TB) *webhook {
	w := &webhook{}
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var e map[string]any
		if err := json.Unmarshal(b, &e); err != nil {
			t.Errorf("webhook body %q: %v", b, err)
		}
		w.mu.Lock()
		w.events = append(w.events, e)
		w.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	w.URL = srv.URL
	return w
}

// Events returns the objects received so far, oldest first.
func (w *webhook) Events() []map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]map[string]any(nil), w.events...)
}

// WaitCount waits up to timeout for n objects and returns those received.
func (w *webhook) WaitCount(n int, timeout time.Duration) []map[string]any {
	for deadline := time.Now().Add(timeout); len(w.Events()) < n && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	return w.Events()
}
