package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestAnswerLineNamesTheLimitThatAnswers: [daily freeze 1,000/24h, hourly
// defer 200/h] after a burst of 201: hourly answers (daily is under), and
// the next step is daily's freeze; after 1,001, daily answers, the last step.
func TestAnswerLineNamesTheLimitThatAnswers(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "daily", Key: []string{"sasl_username"}, Limit: 1000, Period: policy.Duration(24 * time.Hour), Mode: "strict", Action: "freeze"},
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour), Mode: "leaky", Action: "defer"},
	}}
	e, err := policy.NewEngine(c, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, now := context.Background(), time.Date(2026, 11, 20, 18, 0, 0, 0, time.UTC)
	send := func(n int) {
		for range n {
			e.Evaluate(ctx, now, &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "dave", RecipientCount: 1})
		}
	}
	for _, step := range []struct {
		send int
		want string
	}{
		{100, ""},
		{101, "deferred by hourly; daily freezes above 1,000/24h"},
		{800, "frozen by daily"},
	} {
		send(step.send)
		kr, err := e.Lookup(ctx, now, "dave")
		if err != nil {
			t.Fatal(err)
		}
		if got := admin.AnswerLine(kr); got != step.want {
			t.Fatalf("after %d more: %q, want %q (%+v)", step.send, got, step.want, kr)
		}
	}
}
