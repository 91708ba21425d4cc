package policy_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestLocalUserKey: a limit keyed by local_user counts a local user's
// submissions under the uid whatever sender they give, and does not count
// SMTP mail, which has no local user.
func TestLocalUserKey(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "local", Key: []string{"local_user"}, Limit: 5, Period: policy.Duration(time.Hour), Action: "freeze"},
	}}
	eng, err := policy.NewEngine(cfg, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for i := range 10 {
		smtp := &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "alice@example.org", RecipientCount: 1}
		if d := eng.Evaluate(context.Background(), now, smtp); d.Action != policy.Pass {
			t.Fatalf("SMTP message %d: %v, want pass (no local user)", i+1, d.Action)
		}
	}
	var actions []policy.Action
	for i := range 7 {
		req := &policy.Request{ProtocolState: policy.StateEndOfMessage, LocalUser: "1001", RecipientCount: 1,
			Sender: []string{"www-data@example.org", "someone-else@example.com"}[i%2]}
		d := eng.Evaluate(context.Background(), now, req)
		actions = append(actions, d.Action)
		if d.Action == policy.Freeze && d.Key != "1001" {
			t.Fatalf("key %q, want the uid 1001", d.Key)
		}
	}
	want := []policy.Action{policy.Pass, policy.Pass, policy.Pass, policy.Pass, policy.Pass, policy.Freeze, policy.Freeze}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("actions %v, want %v", actions, want)
		}
	}
}
