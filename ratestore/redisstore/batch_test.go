//go:build integration

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// TestBatchedAnswersStayApart: concurrent senders, each with a key and a
// limit of its own (g+1 a day, strict) and stacks of one or two limits,
// are decided in shared script calls; each must get its own answers: its
// own previous state (the number of its earlier requests) and exactly its
// limit admitted.
func TestBatchedAnswersStayApart(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}})
	const senders = 12
	var wg sync.WaitGroup
	admitted := make([]int, senders)
	total := 0
	for g := range senders {
		total += 3 * (g + 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := []policy.StackItem{{Limit: "daily", Key: fmt.Sprintf("user%d", g),
				Params: ratelimit.Limit{Limit: float64(g + 1), Period: 24 * time.Hour, Mode: ratelimit.Strict}, Cost: 1, Count: true, Refuses: true}}
			if g%2 == 1 {
				items = append(items, policy.StackItem{Limit: "aux", Key: fmt.Sprintf("client%d", g),
					Params: ratelimit.Limit{Limit: 1e6, Period: time.Hour, Algorithm: ratelimit.GCRA}, Cost: 1, Count: true, Refuses: true})
			}
			for k := range 3 * (g + 1) {
				out := make([]policy.StackResult, len(items))
				if err := s.EvaluateStack(context.Background(), time.Now(), items, false, out); err != nil {
					t.Error(err)
					return
				}
				if math.Abs(out[0].Prev.Rate-float64(k)) > 0.01 {
					t.Errorf("sender %d, request %d: previous rate %v, want %d (another sender's answer?)", g, k, out[0].Prev.Rate, k)
					return
				}
				if !out[0].Result.Over {
					admitted[g]++
				}
			}
		}()
	}
	wg.Wait()
	for g, n := range admitted {
		if n != g+1 {
			t.Errorf("sender %d (limit %d): %d admitted", g, g+1, n)
		}
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(srv.Info("commandstats", "cmdstat_evalsha"), "calls="), ",")
	if n, err := strconv.Atoi(calls); err != nil || n >= total {
		t.Errorf("%d concurrent requests took %q script calls, want fewer (batched)", total, calls)
	}
}

// TestBatchedCallerGivesUp: while Redis is stopped, one request is in
// flight and two wait in the next batch. The one whose caller gives up
// after 100 ms returns then, is not sent, and counts nothing; the other
// one's call is not cut short by it and succeeds once Redis is back.
func TestBatchedCallerGivesUp(t *testing.T) {
	srv := redistest.Start(t)
	s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 3 * time.Second})
	item := func(key string) []policy.StackItem {
		return []policy.StackItem{{Limit: "hourly", Key: key, Params: ratelimit.Limit{Limit: 10, Period: time.Hour}, Cost: 1, Count: true, Refuses: true}}
	}
	decide := func(ctx context.Context, key string) error {
		return s.EvaluateStack(ctx, time.Now(), item(key), false, make([]policy.StackResult, 1))
	}
	resume := stopped(t, srv)
	errs := make(chan error, 3)
	go func() { errs <- decide(context.Background(), "alice") }() // in flight
	time.Sleep(100 * time.Millisecond)
	var bobTook time.Duration
	var bobErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		bobErr = decide(ctx, "bob")
		bobTook = time.Since(start)
	}()
	go func() { errs <- decide(context.Background(), "carol") }()
	wg.Wait()
	if !errors.Is(bobErr, redisstore.ErrUnavailable) || bobTook > time.Second {
		t.Errorf("bob, who gave up after 100 ms: %v after %v, want ErrUnavailable at once", bobErr, bobTook)
	}
	time.Sleep(200 * time.Millisecond)
	resume()
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("alice or carol, with time left: %v", err)
		}
	}
	for key, want := range map[string]bool{"alice": true, "carol": true, "bob": false} {
		st, err := s.Get(context.Background(), "hourly", key)
		if err != nil {
			t.Fatal(err)
		}
		if has := st != (ratelimit.State{}); has != want {
			t.Errorf("%s has a stored state: %v, want %v", key, has, want)
		}
	}
}

// TestBatchSecondCall: while one call is in flight (Redis stopped), the
// requests that arrive wait in a batch until it holds 96 limits; that
// batch goes as a second call at once, without waiting for the first, and
// the requests after it wait for the next. 95 requests waiting make two
// script calls (the one in flight, then the 95 together); 99 make three
// (the 96 as a second call at once, then the other 3). Every request is
// answered once Redis is back.
func TestBatchSecondCall(t *testing.T) {
	for _, c := range []struct{ waiting, calls int }{{95, 2}, {99, 3}} {
		t.Run(strconv.Itoa(c.waiting), func(t *testing.T) {
			srv := redistest.Start(t)
			s := open(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
			decide := func(key string) error {
				items := []policy.StackItem{{Limit: "hourly", Key: key, Params: ratelimit.Limit{Limit: 10, Period: time.Hour}, Cost: 1, Count: true, Refuses: true}}
				return s.EvaluateStack(context.Background(), time.Now(), items, false, make([]policy.StackResult, 1))
			}
			resume := stopped(t, srv)
			errs := make(chan error, c.waiting+1)
			go func() { errs <- decide("first") }() // in flight alone
			time.Sleep(100 * time.Millisecond)
			for i := range c.waiting {
				go func() { errs <- decide(fmt.Sprintf("user%d", i)) }()
			}
			time.Sleep(300 * time.Millisecond)
			resume()
			for range c.waiting + 1 {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
			calls, _, _ := strings.Cut(strings.TrimPrefix(srv.Info("commandstats", "cmdstat_evalsha"), "calls="), ",")
			if calls != strconv.Itoa(c.calls) {
				t.Errorf("%d requests waiting behind one in flight: %s script calls, want %d", c.waiting, calls, c.calls)
			}
		})
	}
}

// stopped stops srv (SIGSTOP) until the returned function or the end of
// the test resumes it (SIGCONT), whichever comes first.
func stopped(t *testing.T, srv *redistest.Server) (resume func()) {
	srv.Stop()
	resume = sync.OnceFunc(srv.Resume)
	t.Cleanup(resume)
	return resume
}
