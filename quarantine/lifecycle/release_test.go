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

// runsOf returns the ReleaseRun events recorded.
func (r *recorder) runsOf() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.evs {
		if e.Kind == ReleaseRun {
			out = append(out, e)
		}
	}
	return out
}

// TestAutoReleaseReportsOneRun: a key's drip run is one ReleaseRun event
// with the number of messages it released, when its backlog is empty or
// when the drip stops with messages left (refused again), never one per
// message.
func TestAutoReleaseReportsOneRun(t *testing.T) {
	sink := mtatest.StartSink(t)
	rates := &fakeRates{limits: []policy.LimitInfo{{Name: "tenfreeze", Limit: 4, Period: time.Hour}}}
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr()), Rates: rates, DripLimits: []string{"tenfreeze"}})
	e.freeze(t, "alice@example.org", 5)
	ctx := context.Background()
	for _, at := range []time.Duration{0, 15 * time.Minute} {
		if n := e.svc.AutoRelease(ctx, t0.Add(at)); n != 1 {
			t.Fatalf("at +%v released %d, want 1", at, n)
		}
	}
	if runs := e.ev.runsOf(); len(runs) != 0 {
		t.Fatalf("a run reported while it goes on: %+v", runs)
	}
	// Refused again: the run stops with 3 messages left.
	rates.rates = []policy.KeyRate{{Limit: "tenfreeze", Key: "alice", Max: 4, Period: time.Hour, Refusing: true}}
	e.svc.AutoRelease(ctx, t0.Add(30*time.Minute))
	runs := e.ev.runsOf()
	if len(runs) != 1 || runs[0].Count != 2 || runs[0].Pending != 3 || runs[0].Detail != "refused again" || runs[0].Entry.Key != "alice" {
		t.Fatalf("after the drip stopped: %+v", runs)
	}
	// Under the limit again: a new run releases the other three, reported
	// once when the last has left.
	rates.rates = nil
	for i, at := range []time.Duration{time.Hour, 75 * time.Minute, 90 * time.Minute} {
		if n := e.svc.AutoRelease(ctx, t0.Add(at)); n != 1 {
			t.Fatalf("at +%v released %d, want 1", at, n)
		}
		if runs := e.ev.runsOf(); len(runs) != 1+i/2 {
			t.Fatalf("after release %d of the second run: %d runs reported", i+1, len(runs))
		}
	}
	runs = e.ev.runsOf()
	if last := runs[len(runs)-1]; last.Count != 3 || last.Pending != 0 || last.Detail != "" || last.By != "auto-release" {
		t.Fatalf("second run: %+v", last)
	}
	if k := e.ev.kinds(); k[Released] != 5 || k[ReleaseRun] != 2 {
		t.Fatalf("events %v", k)
	}
	sink.WaitCount(t, 5, 10*time.Second)
}

// A thaw with ResetRate records the reset as an event, once per key
// however many of its messages it thaws, naming the key, the operator and
// how many states went, as `ratelimitd rate reset` does.
func TestThawWithResetRecordsTheReset(t *testing.T) {
	sink := mtatest.StartSink(t)
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr()), Rates: &fakeRates{}})
	ids := e.freeze(t, "alice@example.org", 3)
	if _, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, ResetRate: true, By: "op (console)"}); err != nil {
		t.Fatal(err)
	}
	sink.WaitCount(t, 3, 10*time.Second)
	var resets []Event
	e.ev.mu.Lock()
	for _, ev := range e.ev.evs {
		if ev.Kind == RateReset {
			resets = append(resets, ev)
		}
	}
	e.ev.mu.Unlock()
	if len(resets) != 1 || resets[0].Entry.Key != "alice" || resets[0].By != "op (console)" ||
		resets[0].Detail != "0 rate states removed with a thaw" {
		t.Fatalf("reset events %+v, want one for alice by the operator", resets)
	}
}
