package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/ratestore"
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
	hook := startWebhook(t)
	n, err := notify.New(notify.Config{Webhook: notify.Webhook{URL: hook.URL}}, notify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return n, func() []map[string]any {
		if err := n.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return hook.Events()
	}
}

// TestOutcomeRefusalNotifiesWhatFailed: the notification of an outcome
// limit says how many of the sender's recipients failed, as the limit
// counted them, and how many as unknown users when an unknown_rcpt limit
// counts them too.
func TestOutcomeRefusalNotifiesWhatFailed(t *testing.T) {
	key := policy.KeyList{"sasl_username"}
	e, err := policy.NewEngine(policy.Config{Limits: []policy.LimitConfig{
		{Name: "bounce-ratio", Key: key, Per: "bounce", Ratio: 0.10, MinCount: 50, Period: policy.Duration(time.Hour), Action: "freeze"},
		{Name: "unknown", Key: key, Per: "unknown_rcpt", Limit: 1000, Period: policy.Duration(time.Hour), Action: "warn"},
	}}, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	req := &policy.Request{SASLUsername: "alice", Sender: "alice@example.org", ProtocolState: policy.StateEndOfMessage,
		Stage: policy.ViaPolicy, RecipientCount: 1}
	if _, err := e.RecordRecipients(ctx, now, req, 60); err != nil {
		t.Fatal(err)
	}
	for i := range 23 {
		kind := policy.OutcomeUnknownRcpt
		if i%6 == 0 {
			kind = policy.OutcomeBounce // 4 of 23
		}
		if _, err := e.RecordOutcome(ctx, now, req, kind); err != nil {
			t.Fatal(err)
		}
	}
	dec := e.Evaluate(ctx, now.Add(time.Second), req)
	if dec.Action != policy.Freeze || dec.Limit != "bounce-ratio" {
		t.Fatalf("decision %v by %q (%s), want freeze by bounce-ratio", dec.Action, dec.Limit, dec.Reason)
	}
	n, sent := webhookNotifier(t)
	d := &Daemon{notifier: n}
	d.notifyRefusal(req, &dec)
	got := sent()
	want := "alice: 23 of the last 60 recipients bounced, 19 as unknown users (limit 10% of at least 50 per 1h), action freeze"
	if len(got) != 1 || got[0]["summary"] != want || got[0]["outcome"] == nil {
		t.Errorf("notifications %v, want summary %q", got, want)
	}
}
