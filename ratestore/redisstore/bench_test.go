//go:build integration

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

// fastPathVariants are the stores a benchmark compares: the default one
// (FastPath) and one without the fast path (ScriptOnly,
// Options.KnownRecords < 0).
var fastPathVariants = []struct {
	name  string
	known int
}{{"FastPath", 0}, {"ScriptOnly", -1}}

// BenchmarkEvaluateStack decides the default stack (200/hour leaky +
// 1000/day strict) for 100,000 users from 64 goroutines on a local
// redis-server, each user holding a state already (one stack each
// before the timer starts, as in steady operation): the Redis share of a
// policy request. It reports Redis's own time per stack decided
// (redis-µs/op: the script's wall time, INFO commandstats;
// redis-cpu-µs/op: the server's CPU time, INFO cpu, which includes
// reading and answering the calls) and the stacks per script call
// (batching).
//
// FastPath is the default store; ScriptOnly turns the fast path off
// (Options.KnownRecords < 0): the script decides every stack.
func BenchmarkEvaluateStack(b *testing.B) {
	for _, c := range fastPathVariants {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b)
			s := open(b, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, KeyPrefix: redisstore.DefaultKeyPrefix, KnownRecords: c.known})
			benchmarkStacks(b, []*redisstore.Store{s}, srv)
		})
	}
}

// BenchmarkEvaluateStackCluster is BenchmarkEvaluateStack on a Redis
// Cluster of 3 masters: its figures are the masters' sums, to compare
// with one server's (one call per request and slot, not batched).
func BenchmarkEvaluateStackCluster(b *testing.B) {
	nodes := redistest.StartCluster(b, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	s := open(b, redisstore.Options{Addrs: addrs, Timeout: 5 * time.Second, KeyPrefix: redisstore.DefaultKeyPrefix})
	benchmarkStacks(b, []*redisstore.Store{s}, nodes...)
}

// BenchmarkEvaluateStackTwoHosts is BenchmarkEvaluateStack with two
// stores (two hosts) taking turns with each user's messages, the worst
// case of the fast path: each host finds the record the other wrote, so
// every fast decision is refused and the script decides. Its ScriptOnly
// variant turns the fast path off (Options.KnownRecords < 0) for
// comparison.
func BenchmarkEvaluateStackTwoHosts(b *testing.B) {
	for _, c := range fastPathVariants {
		b.Run(c.name, func(b *testing.B) {
			srv := redistest.Start(b)
			o := redisstore.Options{Addrs: []string{srv.Addr}, Timeout: 5 * time.Second, KeyPrefix: redisstore.DefaultKeyPrefix, KnownRecords: c.known}
			benchmarkStacks(b, []*redisstore.Store{open(b, o), open(b, o)}, srv)
		})
	}
}

// prefillUsers decides one default stack for each of users users (named
// by name), from 64 goroutines.
func prefillUsers(b *testing.B, s *redisstore.Store, users int, name func(u int64) string) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]policy.StackResult, 2)
			for u := next.Add(1); u <= int64(users); u = next.Add(1) {
				if err := s.EvaluateStack(context.Background(), time.Now(), defaultStack(name(u)), false, out); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// benchmarkStacks is BenchmarkEvaluateStack on the Redis srv (every
// master in srvs) through the hosts ss: a user's n-th message goes
// through host n % len(ss).
func benchmarkStacks(b *testing.B, ss []*redisstore.Store, srvs ...*redistest.Server) {
	for _, s := range ss {
		prefillUsers(b, s, 100000, func(u int64) string { return "user" + strconv.FormatInt(u%100000, 10) })
	}
	for _, srv := range srvs {
		srv.Must("CONFIG", "RESETSTAT")
	}
	cpu := func() float64 {
		var t float64
		for _, srv := range srvs {
			u, _ := strconv.ParseFloat(srv.Info("cpu", "used_cpu_user"), 64)
			sy, _ := strconv.ParseFloat(srv.Info("cpu", "used_cpu_sys"), 64)
			t += u + sy
		}
		return t
	}
	cpu0 := cpu()
	var n atomic.Int64
	b.SetParallelism(32) // 64 goroutines on 2 CPUs
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		out := make([]policy.StackResult, 2)
		for pb.Next() {
			m := n.Add(1)
			key := "user" + strconv.FormatInt(m%100000, 10)
			s := ss[(m/100000)%int64(len(ss))]
			if err := s.EvaluateStack(context.Background(), time.Now(), defaultStack(key), false, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	// calls=N,usec=N,usec_per_call=N,...
	var calls, usec float64
	for _, srv := range srvs {
		for f := range strings.SplitSeq(srv.Info("commandstats", "cmdstat_evalsha"), ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseFloat(v, 64)
				calls += c
			}
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				u, _ := strconv.ParseFloat(v, 64)
				usec += u
			}
		}
	}
	if calls == 0 {
		b.Fatal("no EVALSHA in INFO commandstats")
	}
	b.ReportMetric(usec/float64(b.N), "redis-µs/op")
	b.ReportMetric((cpu()-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
	b.ReportMetric(float64(b.N)/calls, "stacks/call")
}

// BenchmarkMemory1M stores the default stack's two states (hourly, daily;
// one record per user) for 1,000,000 users named like the load generator's
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
	prefillUsers(b, s, users, func(u int64) string { return fmt.Sprintf("user%07d@example.org", u) })
	keys, _ := strconv.ParseFloat(srv.Must("DBSIZE"), 64)
	if keys != users {
		b.Fatalf("%v keys in Redis, want %d (one record per user)", keys, users)
	}
	grown := used() - before
	b.ReportMetric(grown/users, "bytes/user")
	b.ReportMetric(grown/keys, "bytes/key")
	b.ReportMetric(0, "ns/op")
}
