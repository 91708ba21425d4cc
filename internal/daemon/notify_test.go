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
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// TestAutoReleaseNotifiesOncePerRun: the messages of a drip run, released
// minutes apart, give one "released" notification with their number when
// the run ends ("alice: 3 messages released automatically"), not one per
// message; a run stopped with messages left says why and how many.
func TestAutoReleaseNotifiesOncePerRun(t *testing.T) {
	n, sent := webhookNotifier(t)
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
	got := sent()
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

// webhookNotifier returns a notifier posting to a webhook, and a function
// that closes it and returns the payloads it sent.
func webhookNotifier(t *testing.T) (*notify.Notifier, func() []map[string]any) {
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
	t.Cleanup(hook.Close)
	n, err := notify.New(notify.Config{Webhook: notify.Webhook{URL: hook.URL}}, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return n, func() []map[string]any {
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return got
	}
}

// TestOutcomeRefusalNotifiesWhatFailed: the notification of an outcome
// limit says how many of the sender's recipients failed, as the limit
// counted them.
func TestOutcomeRefusalNotifiesWhatFailed(t *testing.T) {
	n, sent := webhookNotifier(t)
	d := &Daemon{notifier: n}
	req := &policy.Request{SASLUsername: "alice", Sender: "alice@example.org"}
	d.notifyRefusal(req, &policy.Decision{Action: policy.Freeze, Limit: "bounce-ratio", Key: "alice", Rate: 23, Max: 6,
		Period: time.Hour, Outcome: "23 of the last 60 recipients bounced (limit 10% of at least 50 per 1h)"})
	got := sent()
	if len(got) != 1 || got[0]["summary"] != "alice: 23 of the last 60 recipients bounced (limit 10% of at least 50 per 1h), action freeze" ||
		got[0]["outcome"] == nil {
		t.Errorf("notifications %v", got)
	}
}
