package lifecycle

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/policy"
)

// fakeRates answers Lookup with rates and Limits with limits.
type fakeRates struct {
	rates  []policy.KeyRate
	limits []policy.LimitInfo
}

func (f *fakeRates) Reset(context.Context, string, string) (int, error) { return 0, nil }
func (f *fakeRates) Lookup(context.Context, time.Time, string) ([]policy.KeyRate, error) {
	return f.rates, nil
}
func (f *fakeRates) Limits() []policy.LimitInfo { return f.limits }

// TestAutoReleaseFrozenDrip: frozen mail of a drip limit is re-injected
// one message per period/limit while the key is not refused, also when
// its rate state has decayed away (the limit's configured rate, with
// the key's override, sets the pace).
func TestAutoReleaseFrozenDrip(t *testing.T) {
	sink := mtatest.StartSink(t)
	rates := &fakeRates{
		rates:  []policy.KeyRate{{Limit: "tenfreeze", Key: "alice", Max: 10, Period: time.Hour, Refusing: true}},
		limits: []policy.LimitInfo{{Name: "tenfreeze", Limit: 10, Period: time.Hour, Overrides: map[string]float64{"alice": 4}}},
	}
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr()), Rates: rates, DripLimits: []string{"tenfreeze"}})
	e.freeze(t, "alice@example.org", 3)
	ctx := context.Background()
	if n := e.svc.AutoRelease(ctx, t0); n != 0 {
		t.Fatalf("released %d while refused", n)
	}
	rates.rates = nil        // decayed away: 4/hour for alice, one per 15 minutes
	e.svc.SetDripLimits(nil) // a reload that drops auto_release
	if n := e.svc.AutoRelease(ctx, t0); n != 0 {
		t.Fatalf("released %d with no drip limit", n)
	}
	e.svc.SetDripLimits([]string{"tenfreeze"})
	for _, c := range []struct {
		at   time.Duration
		want int
	}{{0, 1}, {time.Minute, 0}, {15 * time.Minute, 1}, {29 * time.Minute, 0}, {30 * time.Minute, 1}, {time.Hour, 0}} {
		if n := e.svc.AutoRelease(ctx, t0.Add(c.at)); n != c.want {
			t.Fatalf("at +%v released %d, want %d", c.at, n, c.want)
		}
	}
	msgs := sink.WaitCount(t, 3, 10*time.Second)
	for i, m := range msgs {
		if want := []string{"message 00", "message 01", "message 02"}[i]; m.Header("Subject") != want {
			t.Fatalf("release %d was %q, want %q (oldest first)", i, m.Header("Subject"), want)
		}
	}
	if k := e.ev.kinds(); k[Released] != 3 {
		t.Fatalf("events %v", k)
	}
}
