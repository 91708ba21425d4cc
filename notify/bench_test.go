package notify

import (
	"context"
	"testing"
)

// BenchmarkNotifyRepeatRefusal is the cost on the request path during a
// spam run: every refused message calls Notify, and all but the first are
// suppressed by the one-per-key-limit-period rule.
func BenchmarkNotifyRepeatRefusal(b *testing.B) {
	n, err := New(Config{Webhook: Webhook{URL: "http://127.0.0.1:9/unused", Retry: Retry{Attempts: 1}}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close(context.Background())
	e := refusal
	n.Notify(e)
	b.ReportAllocs()
	for b.Loop() {
		n.Notify(e)
	}
}
