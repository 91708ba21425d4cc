package admin

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestAnswerLineNamesTheLimitThatAnswers: [daily freeze 1,000/24h, hourly
// defer 200/h] after a burst of 201: hourly answers (daily is under), and
// the next step is daily's freeze; after 1,001, daily answers, the last step.
func TestAnswerLineNamesTheLimitThatAnswers(t *testing.T) {
	user := []string{"sasl_username"}
	e, err := policy.NewEngine(policy.Config{Limits: []policy.LimitConfig{
		{Name: "daily", Key: user, Limit: 1000, Period: policy.Duration(24 * time.Hour), Mode: "strict", Action: "freeze"},
		{Name: "hourly", Key: user, Limit: 200, Period: policy.Duration(time.Hour), Mode: "leaky", Action: "defer"},
	}}, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 20, 18, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		send int
		want string
	}{
		{100, ""},
		{101, "deferred by hourly; daily freezes above 1,000/24h"},
		{800, "frozen by daily"},
	} {
		for range step.send {
			e.Evaluate(context.Background(), now, &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "dave", RecipientCount: 1})
		}
		kr, err := e.Lookup(context.Background(), now, "dave")
		if err != nil {
			t.Fatal(err)
		}
		if got := AnswerLine(kr); got != step.want {
			t.Fatalf("after %d more: %q, want %q (%+v)", step.send, got, step.want, kr)
		}
	}
}
