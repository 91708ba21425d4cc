//go:build integration

package redisstore_test

import (
	"context"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// TestExpiryKept: the decision script stores each record's expiry at its
// start and keeps it (SET KEEPTTL) while it is late enough; it sets a
// later one (an eighth of the state's lifetime of slack) when the state
// needs it. A state written by Update moves the expiry only if it needs
// a later one. At every step the key outlives its state: the state is
// negligible by the key's expiry.
func TestExpiryKept(t *testing.T) {
	srv := redistest.Start(t)
	hourly := ratelimit.Limit{Limit: 200, Period: time.Hour}
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Limits: func(string) (ratelimit.Limit, bool) { return hourly, true }})
	items := []policy.StackItem{{Limit: "hourly", Key: "erin", Params: hourly, Cost: 1, Count: true, Refuses: true}}
	key := s.Key("erin")
	decide := func(cost float64) {
		t.Helper()
		items[0].Cost = cost
		out := make([]policy.StackResult, 1)
		if err := s.EvaluateStack(context.Background(), time.Now(), items, false, out); err != nil || out[0].Err != nil || !out[0].Stored {
			t.Fatalf("EvaluateStack: %v %+v", err, out[0])
		}
	}
	// check returns the key's expiry (Unix ms, PEXPIRETIME) after
	// checking that the record starts with it and that the state is
	// negligible by then, and not much later.
	check := func(step string, tight bool) int64 {
		t.Helper()
		raw := srv.Must("GET", key)
		at, err := strconv.ParseInt(srv.Must("PEXPIRETIME", key), 10, 64)
		if err != nil || at <= 0 {
			t.Fatalf("%s: PEXPIRETIME %v (%v), want an expiry", step, at, err)
		}
		if len(raw) != 8+1+len("hourly")+20 {
			t.Fatalf("%s: record of %d bytes, want 35 (expiry, one entry)", step, len(raw))
		}
		if v := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[:8]))); int64(v) != at {
			t.Errorf("%s: stored expiry %v, key's expiry %d", step, v, at)
		}
		st, err := s.Get(context.Background(), "hourly", "erin")
		if err != nil {
			t.Fatal(err)
		}
		if !hourly.Negligible(st, time.UnixMilli(at)) {
			t.Errorf("%s: state %+v not negligible at the key's expiry %d: expires too early", step, st, at)
		}
		// The script's lifetime of an exponential state: max(ln(2r), 2)
		// periods; plus an eighth of slack (the rates only grow here,
		// so a kept expiry is within it too).
		life := math.Max(math.Log(2*st.Rate), 2) * float64(hourly.Period/time.Millisecond)
		if limit := st.Time/1e6 + int64(life*9/8) + 2; tight && at > limit {
			t.Errorf("%s: state %+v expires at %d, want by %d: too late", step, st, at, limit)
		}
		return at
	}
	decide(1)
	first := check("first", true)
	time.Sleep(20 * time.Millisecond)
	decide(1)
	if at := check("second", true); at != first {
		t.Errorf("second decision moved the expiry from %d to %d, want it kept", first, at)
	}
	// A burst raises the rate: the state lives longer, and the key too.
	decide(150)
	if at := check("burst", true); at <= first {
		t.Errorf("after a burst the expiry is %d, want later than %d", at, first)
	}
	// A state written by Update is read, and needs no later expiry: the
	// hash's is kept (and the decision after it too).
	burst := check("burst again", true)
	update := func(rate float64) {
		t.Helper()
		if err := s.Update(context.Background(), "hourly", "erin", func(ratelimit.State) (ratelimit.State, bool) {
			return ratelimit.State{Time: time.Now().UnixNano(), Rate: rate}, true
		}); err != nil {
			t.Fatal(err)
		}
	}
	update(10)
	if at := check("Update", false); at != burst {
		t.Errorf("Update to rate 10 moved the expiry from %d to %d", burst, at)
	}
	decide(1)
	check("after Update", false)
	// A hash about to expire: Update moves its expiry as its state needs.
	soon := time.Now().Add(time.Minute).UnixMilli()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], math.Float64bits(float64(soon)))
	srv.Must("SETRANGE", key, "0", string(b[:]))
	srv.Must("PEXPIREAT", key, strconv.FormatInt(soon, 10))
	update(10)
	if at := check("Update of a hash about to expire", true); at <= soon {
		t.Errorf("Update left the expiry at %d, want later than %d", at, soon)
	}
}
