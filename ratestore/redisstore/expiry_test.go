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

// TestExpiryKept: the decision script stores each key's expiry after the
// state (28 bytes) and keeps it (SET KEEPTTL) while it is late enough;
// it sets a later one (an eighth of the state's lifetime of slack) when
// the state needs it, and on states of 20 bytes (written by Update). At
// every step the key outlives its state: the state is negligible by the
// key's expiry.
func TestExpiryKept(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	hourly := ratelimit.Limit{Limit: 200, Period: time.Hour}
	items := []policy.StackItem{{Limit: "hourly", Key: "erin", Params: hourly, Cost: 1, Count: true, Refuses: true}}
	key := s.Key("hourly", "erin")
	decide := func(cost float64) {
		t.Helper()
		items[0].Cost = cost
		out := make([]policy.StackResult, 1)
		if err := s.EvaluateStack(context.Background(), time.Now(), items, false, out); err != nil || out[0].Err != nil || !out[0].Stored {
			t.Fatalf("EvaluateStack: %v %+v", err, out[0])
		}
	}
	// check returns the key's expiry (Unix ms, PEXPIRETIME) after
	// checking that the stored value carries it and that the state is
	// negligible by then, and not much later.
	check := func(step string) int64 {
		t.Helper()
		raw := srv.Must("GET", key)
		at, err := strconv.ParseInt(srv.Must("PEXPIRETIME", key), 10, 64)
		if err != nil || at <= 0 {
			t.Fatalf("%s: PEXPIRETIME %v (%v), want an expiry", step, at, err)
		}
		if len(raw) != 28 {
			t.Fatalf("%s: stored value of %d bytes, want 28 (state + expiry)", step, len(raw))
		}
		if v := math.Float64frombits(binary.LittleEndian.Uint64([]byte(raw[20:]))); int64(v) != at {
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
		if limit := st.Time/1e6 + int64(life*9/8) + 2; at > limit {
			t.Errorf("%s: state %+v expires at %d, want by %d: too late", step, st, at, limit)
		}
		return at
	}
	decide(1)
	first := check("first")
	time.Sleep(20 * time.Millisecond)
	decide(1)
	if at := check("second"); at != first {
		t.Errorf("second decision moved the expiry from %d to %d, want it kept", first, at)
	}
	// A burst raises the rate: the state lives longer, and the key too.
	decide(150)
	if at := check("burst"); at <= first {
		t.Errorf("after a burst the expiry is %d, want later than %d", at, first)
	}
	// A state written by Update (20 bytes, its own expiry) is read, and
	// the next decision stores the expiry it sets.
	if err := s.Update(context.Background(), "hourly", "erin", func(ratelimit.State) (ratelimit.State, bool) {
		return ratelimit.State{Time: time.Now().UnixNano(), Rate: 10}, true
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Must("GET", key)); n != 20 {
		t.Fatalf("Update stored %d bytes, want 20", n)
	}
	decide(1)
	check("after Update")
}
