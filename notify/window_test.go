package notify

import (
	"testing"
	"time"
)

// TestRefusalMemoryForgetsExpiredBehindLongWindow: a key with a long
// window (daily) recorded first must not keep expired short windows
// (hourly) from being forgotten when the memory is full.
func TestRefusalMemoryForgetsExpiredBehindLongWindow(t *testing.T) {
	h := startHook(t)
	n := newNotifier(t, Config{MaxKeys: 3, Webhook: Webhook{URL: h.srv.URL}}, Options{})
	t0 := refusal.Time
	ev := func(key string, period time.Duration, at time.Duration) Event {
		e := refusal
		e.Key, e.Period, e.Time = key, period, t0.Add(at)
		return e
	}
	for _, e := range []Event{ev("a", 24*time.Hour, 0), ev("b", time.Hour, 0), ev("c", time.Hour, 0)} {
		if !n.Notify(e) {
			t.Fatalf("first refusal of %s suppressed", e.Key)
		}
	}
	if !n.Notify(ev("b", time.Hour, 2*time.Hour)) {
		t.Error("b refused again after its hour was suppressed")
	}
	// c's window ended an hour ago: d takes its place.
	if !n.Notify(ev("d", time.Hour, 2*time.Hour)) {
		t.Error("a new key was suppressed although c's window had expired")
	}
	if n.Notify(ev("e", time.Hour, 2*time.Hour)) {
		t.Error("a fourth live window was accepted with max_keys 3")
	}
}
