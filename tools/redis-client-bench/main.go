// Command redis-client-bench compares github.com/redis/rueidis and
// github.com/redis/go-redis/v9 on the Redis store's workload: one EVALSHA
// of a read-modify-write script per request, C concurrent callers, many
// keys. It lives in the tools module so the daemon does not depend on the
// library it did not choose. Usage (in tools/):
//
//	go run ./redis-client-bench -addr 127.0.0.1:6379 -c 64 -n 200000 -users 100000
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// script is the shape of the store's per-request script: read one state,
// decay it, store the new one with an expiry.
const script = `
local raw = redis.call('GET', KEYS[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local r = tonumber(ARGV[1])
if raw then
  local ps, prate = struct.unpack('<dd', raw)
  local w = math.max((now - ps) / 3600, 1e-10)
  r = (1 - math.exp(-w)) * r / w + math.exp(-w) * prate
end
redis.call('SET', KEYS[1], struct.pack('<dd', now, r), 'PX', 7200000)
return string.format('%.17g', r)`

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis address")
	conc := flag.Int("c", 64, "concurrent callers")
	n := flag.Int("n", 200000, "requests per client library")
	users := flag.Int("users", 100000, "distinct keys")
	flag.Parse()
	ctx := context.Background()

	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{*addr}, DisableCache: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rs := rueidis.NewLuaScript(script)
	run("rueidis", *conc, *n, *users, func(key string) error {
		return rs.Exec(ctx, rc, []string{key}, []string{"1"}).Error()
	})
	rc.Close()

	gc := goredis.NewClient(&goredis.Options{Addr: *addr})
	gs := goredis.NewScript(script)
	run("go-redis/v9", *conc, *n, *users, func(key string) error {
		return gs.Run(ctx, gc, []string{key}, 1).Err()
	})
	gc.Close()
}

func run(name string, conc, n, users int, call func(string) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				key := "bench:{u" + strconv.Itoa(rand.IntN(users)) + "}"
				t := time.Now()
				if err := call(key); err != nil {
					fmt.Fprintln(os.Stderr, name, err)
					os.Exit(1)
				}
				lat[g] = append(lat[g], time.Since(t))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	fmt.Printf("%-12s C=%d n=%d users=%d: %8.0f req/s  p50 %v  p99 %v\n", name, conc, n, users,
		float64(n)/el.Seconds(), all[len(all)/2], all[len(all)*99/100])
}
