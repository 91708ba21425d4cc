//go:build integration

package redisstore_test

import (
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// legacyState is a state as the earlier layout's decision script stored
// it: 20 bytes of state, then 8 of the key's expiry (Unix ms).
func legacyState(st ratelimit.State, expiry int64) string {
	var b [28]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(st.Time/1e9))
	binary.LittleEndian.PutUint32(b[8:], uint32(st.Time%1e9))
	binary.LittleEndian.PutUint64(b[12:], math.Float64bits(st.Rate))
	binary.LittleEndian.PutUint64(b[20:], math.Float64bits(float64(expiry)))
	return string(b[:])
}

// TestEarlierLayoutIsRead: states written by an earlier version (one
// string per limit and rate key) count after an upgrade: a user at the
// limit stays refused, Get and Range see the state once, the first
// decision moves it into the user's hash, and an outage's merge adds to
// it. A rolling upgrade forgives no one.
func TestEarlierLayoutIsRead(t *testing.T) {
	srv := redistest.Start(t)
	lims := map[string]ratelimit.Limit{"hourly": {Limit: outageLimit, Period: time.Hour, Mode: ratelimit.Strict},
		"daily": {Limit: 100, Period: 24 * time.Hour}}
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr},
		Limits: func(n string) (ratelimit.Limit, bool) { l, ok := lims[n]; return l, ok }})
	ctx := context.Background()
	now := time.Now()
	exp := now.Add(48 * time.Hour).UnixMilli()
	// old@x.org sent outageLimit messages a minute ago, counted by an
	// earlier version: 28-byte states; merged@x.org has a 20-byte one.
	srv.Must("SET", s.LegacyKey("hourly", "old@x.org"), legacyState(ratelimit.State{Time: now.Add(-time.Minute).UnixNano(), Rate: outageLimit}, exp))
	srv.Must("SET", s.LegacyKey("daily", "old@x.org"), legacyState(ratelimit.State{Time: now.Add(-time.Minute).UnixNano(), Rate: outageLimit}, exp))
	srv.Must("SET", s.LegacyKey("hourly", "merged@x.org"), legacyState(ratelimit.State{Time: now.UnixNano(), Rate: 5}, exp)[:20])
	if st, err := s.Get(ctx, "hourly", "old@x.org"); err != nil || st.Rate != outageLimit {
		t.Fatalf("Get of an earlier state: %+v, %v", st, err)
	}
	count := func() map[string]int {
		seen := map[string]int{}
		if err := s.Range(ctx, func(limit, key string, st ratelimit.State) bool {
			seen[limit+" "+key]++
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return seen
	}
	if got := count(); len(got) != 3 || got["hourly old@x.org"] != 1 || got["daily old@x.org"] != 1 || got["hourly merged@x.org"] != 1 {
		t.Errorf("Range over earlier states: %v", got)
	}
	out := make([]policy.StackResult, 2)
	if err := s.EvaluateStack(ctx, time.Now(), outageStack("old@x.org"), false, out); err != nil {
		t.Fatal(err)
	}
	if !out[0].Result.Over || out[0].Prev.Rate != outageLimit {
		t.Errorf("a user at the limit before the upgrade: hourly %+v, want over", out[0])
	}
	// The strict hourly limit counted the refused message into the
	// record; the leaky daily one stored nothing and stays where it was.
	if rec := srv.Must("GET", s.Key("hourly", "old@x.org")); !strings.Contains(rec, "\x06hourly") || strings.Contains(rec, "daily") {
		t.Errorf("the user's record after a decision: %q, want hourly's entry alone", rec)
	}
	if got := count(); len(got) != 3 || got["hourly old@x.org"] != 1 || got["daily old@x.org"] != 1 {
		t.Errorf("Range after the move into the hash: %v (each state once)", got)
	}
	// A merge adds to the earlier state.
	if n, err := s.Merge(ctx, "o1", "hourly", []string{"merged@x.org"}, []ratelimit.State{{Time: time.Now().UnixNano(), Rate: 3}}); err != nil || n != 1 {
		t.Fatalf("Merge: %d, %v", n, err)
	}
	if st, err := s.Get(ctx, "hourly", "merged@x.org"); err != nil || st.Rate < 7.99 || st.Rate > 8.0001 {
		t.Errorf("merged onto an earlier state of 5: %+v, %v; want 8", st, err)
	}
	// Delete forgets both forms.
	if ok, err := s.Delete(ctx, "hourly", "old@x.org"); !ok || err != nil {
		t.Errorf("Delete: %v, %v", ok, err)
	}
	if st, _ := s.Get(ctx, "hourly", "old@x.org"); !st.IsZero() {
		t.Errorf("after Delete: %+v", st)
	}
}

// TestWrongTypeIsItsKeysProblem: a rate key's record overwritten by
// another program with a value that does not parse counts as no state
// for that key (every limit of it, reported through OnBadState) and is
// replaced, and so is a key of another type; other users' decisions, a
// merge and an update of it go on.
func TestWrongTypeIsItsKeysProblem(t *testing.T) {
	srv := redistest.Start(t)
	var bad []string
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, OnBadState: func(limit, key string) { bad = append(bad, limit+" "+key) }})
	ctx := context.Background()
	out := make([]policy.StackResult, 2)
	for _, u := range []string{"w@x.org", "ok@x.org"} {
		for range 3 {
			if err := s.EvaluateStack(ctx, time.Now(), outageStack(u), false, out); err != nil {
				t.Fatal(err)
			}
		}
	}
	srv.Must("SET", s.Key("hourly", "w@x.org"), "not a record")
	if st, err := s.Get(ctx, "hourly", "w@x.org"); err != nil || !st.IsZero() {
		t.Errorf("Get of a wrong type: %+v, %v", st, err)
	}
	if err := s.EvaluateStack(ctx, time.Now(), outageStack("w@x.org"), false, out); err != nil {
		t.Fatal(err)
	}
	if out[0].Result.Rate > 1.01 || out[1].Result.Rate > 1.01 || !out[0].Stored || !out[1].Stored {
		t.Errorf("the replaced key's request: %+v %+v, want fresh states stored", out[0], out[1])
	}
	if len(bad) != 2 {
		t.Errorf("OnBadState: %q, want both limits of w@x.org", bad)
	}
	if err := s.EvaluateStack(ctx, time.Now(), outageStack("ok@x.org"), false, out); err != nil || out[0].Result.Rate < 3.9 {
		t.Errorf("another user: %v %+v", err, out[0])
	}
	if st, err := s.Get(ctx, "daily", "w@x.org"); err != nil || st.Rate < 0.99 || st.Rate > 1.01 {
		t.Errorf("the wrong value was not replaced: %+v, %v", st, err)
	}
	srv.Must("RPUSH", s.Key("hourly", "l@x.org"), "a list")
	if err := s.EvaluateStack(ctx, time.Now(), outageStack("l@x.org"), false, out); err != nil || !out[0].Stored {
		t.Errorf("a key of another type: %v %+v, want replaced", err, out[0])
	}
	srv.Must("SET", s.Key("hourly", "m@x.org"), "not a record")
	if n, err := s.Merge(ctx, "o1", "hourly", []string{"m@x.org"}, []ratelimit.State{{Time: time.Now().UnixNano(), Rate: 3}}); err != nil || n != 1 {
		t.Errorf("Merge onto a wrong type: %d, %v", n, err)
	}
	srv.Must("HSET", s.Key("hourly", "u@x.org"), "f", "a hash")
	if err := s.Update(ctx, "hourly", "u@x.org", func(ratelimit.State) (ratelimit.State, bool) {
		return ratelimit.State{Time: time.Now().UnixNano(), Rate: 2}, true
	}); err != nil {
		t.Errorf("Update of a wrong type: %v", err)
	}
}
