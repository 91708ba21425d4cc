package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// defaultStack is the default stack of key: 200/hour leaky and 1000/day
// strict, both counted and refusing.
func defaultStack(key string) []policy.StackItem {
	return []policy.StackItem{
		{Limit: "hourly", Key: key, Params: ratelimit.Limit{Limit: 200, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
		{Limit: "daily", Key: key, Params: ratelimit.Limit{Limit: 1000, Period: 24 * time.Hour, Mode: ratelimit.Strict}, Cost: 1, Count: true, Refuses: true},
	}
}

// BenchmarkEvaluateStack decides the default stack (200/hour leaky +
// 1000/day strict) for 100,000 users from 64 goroutines on a local
// redis-server: the Redis share of a policy request. It reports Redis's
// own time per stack decided (redis-µs/op: the script's wall time, INFO
// commandstats; redis-cpu-µs/op: the server's CPU time, INFO cpu, which
// includes reading and answering the calls) and the stacks per script
// call (batching).
func BenchmarkEvaluateStack(b *testing.B) {
	srv := redistest.Start(b)
	s := open(b, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, KeyPrefix: redisstore.DefaultKeyPrefix})
	srv.Must("CONFIG", "RESETSTAT")
	cpu := func() float64 {
		u, _ := strconv.ParseFloat(srv.Info("cpu", "used_cpu_user"), 64)
		sy, _ := strconv.ParseFloat(srv.Info("cpu", "used_cpu_sys"), 64)
		return u + sy
	}
	cpu0 := cpu()
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]policy.StackResult, 2)
		for pb.Next() {
			key := "user" + strconv.FormatInt(n.Add(1)%100000, 10)
			if err := s.EvaluateStack(context.Background(), time.Now(), defaultStack(key), false, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	// calls=N,usec=N,usec_per_call=N,...
	var calls, usec float64
	for f := range strings.SplitSeq(srv.Info("commandstats", "cmdstat_evalsha"), ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			calls, _ = strconv.ParseFloat(v, 64)
		}
		if v, ok := strings.CutPrefix(f, "usec="); ok {
			usec, _ = strconv.ParseFloat(v, 64)
		}
	}
	if calls == 0 {
		b.Fatal("no EVALSHA in INFO commandstats")
	}
	b.ReportMetric(usec/float64(b.N), "redis-µs/op")
	b.ReportMetric((cpu()-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
	b.ReportMetric(float64(b.N)/calls, "stacks/call")
}

// BenchmarkMemory1M stores the default stack's two states (hourly, daily)
// for 1,000,000 users named like the load generator's
// ("user0000001@example.org") on a fresh redis-server and reports Redis's
// used_memory growth (INFO memory) per user and per key. It runs once
// whatever b.N; about half a minute.
func BenchmarkMemory1M(b *testing.B) {
	const users = 1_000_000
	srv := redistest.Start(b)
	s := open(b, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 10 * time.Second, KeyPrefix: redisstore.DefaultKeyPrefix})
	used := func() float64 {
		v, err := strconv.ParseFloat(srv.Info("memory", "used_memory"), 64)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	before := used()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]policy.StackResult, 2)
			for u := next.Add(1); u <= users; u = next.Add(1) {
				key := fmt.Sprintf("user%07d@example.org", u)
				if err := s.EvaluateStack(context.Background(), time.Now(), defaultStack(key), false, out); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	keys, _ := strconv.ParseFloat(srv.Must("DBSIZE"), 64)
	if keys != 2*users {
		b.Fatalf("%v keys in Redis, want %d", keys, 2*users)
	}
	grown := used() - before
	b.ReportMetric(grown/users, "bytes/user")
	b.ReportMetric(grown/keys, "bytes/key")
	b.ReportMetric(0, "ns/op")
}
