package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratelimit/redisstore"
)

// BenchmarkEvaluateStack decides the default stack (200/hour leaky +
// 1000/day strict) for 100,000 users from 64 goroutines on a local
// redis-server: the Redis share of a policy request.
func BenchmarkEvaluateStack(b *testing.B) {
	srv := redistest.Start(b)
	s, err := redisstore.New(context.Background(), redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]policy.StackResult, 2)
		for pb.Next() {
			key := "user" + strconv.FormatInt(n.Add(1)%100000, 10)
			items := []policy.StackItem{
				{Limit: "hourly", Key: key, Params: ratelimit.Limit{Limit: 200, Period: time.Hour}, Cost: 1, Count: true, Refuses: true},
				{Limit: "daily", Key: key, Params: ratelimit.Limit{Limit: 1000, Period: 24 * time.Hour, Mode: ratelimit.Strict}, Cost: 1, Count: true, Refuses: true},
			}
			if err := s.EvaluateStack(context.Background(), time.Now(), items, false, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	// Redis's own time per script call, independent of the load on the
	// machine: calls=N,usec=N,usec_per_call=N,...
	for f := range strings.SplitSeq(srv.Info("commandstats", "cmdstat_evalsha"), ",") {
		if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
			if us, err := strconv.ParseFloat(v, 64); err == nil {
				b.ReportMetric(us, "redis-µs/op")
			}
		}
	}
}
