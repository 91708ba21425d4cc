package policy_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

var refusalText = regexp.MustCompile(`: ([0-9.]+) per 1h \(limit 200\); try again in (\S+)$`)

// TestRefusalTextNeverReadsWithinLimit: a sender who keeps just above
// 200/hour is refused with texts whose rate reads as more than 200 (e.g.
// 200.01, never "200") and whose wait is at least 1s (never "0s").
func TestRefusalTextNeverReadsWithinLimit(t *testing.T) {
	for _, mode := range []string{"leaky", "strict"} {
		cfg := policy.Config{Limits: []policy.LimitConfig{
			{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour), Mode: mode, Action: "defer"},
		}}
		eng, err := policy.NewEngine(cfg, ratestore.NewMemory(ratestore.MemoryOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
		req := &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "carol", RecipientCount: 1}
		refused := 0
		for i := 0; i < 20000; i++ {
			// Just faster than the limit allows: 200.3 messages an hour,
			// so every refusal is a rate a hair over 200.
			now = now.Add(time.Hour / 2003 * 10)
			d := eng.Evaluate(context.Background(), now, req)
			if d.Action == policy.Pass {
				continue
			}
			refused++
			m := refusalText.FindStringSubmatch(d.Text)
			if m == nil {
				t.Fatalf("%s: unexpected text %q", mode, d.Text)
			}
			if r, _ := strconv.ParseFloat(m[1], 64); r <= 200 {
				t.Fatalf("%s: rate %v over 200 reads %q: %q", mode, d.Rate, m[1], d.Text)
			}
			if m[2] == "0s" {
				t.Fatalf("%s: wait %v reads 0s: %q", mode, d.RetryAfter, d.Text)
			}
		}
		if refused == 0 {
			t.Fatalf("%s: nothing refused", mode)
		}
	}
}
