//go:build integration

package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

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
	srv.Must("SET", s.Key("w@x.org"), "not a record")
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
	srv.Must("RPUSH", s.Key("l@x.org"), "a list")
	if err := s.EvaluateStack(ctx, time.Now(), outageStack("l@x.org"), false, out); err != nil || !out[0].Stored {
		t.Errorf("a key of another type: %v %+v, want replaced", err, out[0])
	}
	srv.Must("SET", s.Key("m@x.org"), "not a record")
	if n, err := s.Merge(ctx, "o1", "hourly", []string{"m@x.org"}, []ratelimit.State{{Time: time.Now().UnixNano(), Rate: 3}}); err != nil || n != 1 {
		t.Errorf("Merge onto a wrong type: %d, %v", n, err)
	}
	srv.Must("HSET", s.Key("u@x.org"), "f", "a hash")
	if err := s.Update(ctx, "hourly", "u@x.org", func(ratelimit.State) (ratelimit.State, bool) {
		return ratelimit.State{Time: time.Now().UnixNano(), Rate: 2}, true
	}); err != nil {
		t.Errorf("Update of a wrong type: %v", err)
	}
}
