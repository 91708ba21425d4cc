package policy_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// A stack of 200/hour (leaky) and 1000/day (strict) per SASL user: a
// fresh user may send a burst of exactly 200 messages; the 201st is
// deferred with 450 4.7.1 until the rate has decayed.
func ExampleEngine_Evaluate() {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour), Mode: "leaky", Action: "defer"},
		{Name: "daily", Key: []string{"sasl_username"}, Limit: 1000, Period: policy.Duration(24 * time.Hour), Mode: "strict", Action: "defer"},
	}}
	eng, err := policy.NewEngine(cfg, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	req := &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "alice", RecipientCount: 1}
	passed := 0
	for eng.Evaluate(context.Background(), now, req).Action == policy.Pass {
		passed++
	}
	d := eng.Evaluate(context.Background(), now, req)
	fmt.Println(passed, "passed")
	fmt.Println(d.Code, d.Enhanced, d.Text)
	d = eng.Evaluate(context.Background(), now.Add(d.RetryAfter), req)
	fmt.Println("after the retry time:", d.Action)
	// Output:
	// 200 passed
	// 450 4.7.1 rate limit exceeded: 201 per 1h (limit 200); try again in 18s
	// after the retry time: pass
}
