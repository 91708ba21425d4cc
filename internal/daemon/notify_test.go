package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// TestAutoReleaseNotifiesOncePerRun: the messages of a drip run, released
// minutes apart, give one "released" notification with their number when
// the run ends ("alice: 3 messages released automatically"), not one per
// message; a run stopped with messages left says why and how many.
func TestAutoReleaseNotifiesOncePerRun(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]any
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e map[string]any
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &e)
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	}))
	defer hook.Close()
	n, err := notify.New(notify.Config{Webhook: notify.Webhook{URL: hook.URL}}, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q := &quarantineNotify{d: &Daemon{notifier: n}}
	ctx := context.Background()
	alice := quarantine.Entry{ID: "a1", Key: "alice", Limit: "hourly", Sender: "alice@example.org"}
	for range 3 {
		q.QuarantineEvent(ctx, lifecycle.Event{Kind: lifecycle.Released, Time: time.Now(), Entry: alice, By: "auto-release"})
	}
	q.QuarantineEvent(ctx, lifecycle.Event{Kind: lifecycle.ReleaseRun, Time: time.Now(), Entry: alice, By: "auto-release", Count: 3})
	bob := quarantine.Entry{ID: "b1", Key: "bob", Limit: "hourly"}
	q.QuarantineEvent(ctx, lifecycle.Event{Kind: lifecycle.Released, Time: time.Now(), Entry: bob, By: "auto-release"})
	q.QuarantineEvent(ctx, lifecycle.Event{Kind: lifecycle.ReleaseRun, Time: time.Now(), Entry: bob, By: "auto-release",
		Count: 1, Pending: 4, Detail: "refused again"})
	q.flushAll()
	if err := n.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d notifications, want one per run: %v", len(got), got)
	}
	if e := got[0]; e["event"] != "released" || e["key"] != "alice" || e["count"] != 3.0 ||
		e["summary"] != "alice: 3 messages released automatically" {
		t.Errorf("alice's run: %v", e)
	}
	if e := got[1]; e["summary"] != "bob: 1 message released automatically (stopped: refused again, 4 messages left)" {
		t.Errorf("bob's run: %v", e)
	}
}
