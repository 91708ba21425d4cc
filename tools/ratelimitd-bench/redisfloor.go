package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The Redis floor is what Redis spends on the least a shared store can ask
// of it per message: one call of an empty script (EVALSHA), keyed by the
// message's rate key so that a Cluster runs it on the key's master, sent
// through rueidis with automatic pipelining as the daemon's client does.
// The daemon's Redis CPU per message over this figure is what its
// decisions cost Redis beyond one round trip each.

// floorScript is the empty script of the Redis floor.
const floorScript = "return 0"

// Done-when targets of the Redis floor: at C=64, K=100,000 the daemon's
// Redis CPU per message is at most the paced floor's of the same run on
// one server and 1.5 times it on a Cluster.
const (
	targetRedisFloor        = 1.0
	targetRedisFloorCluster = 1.5
)

// redisFloorSpec is one measured run of the Redis floor.
type redisFloorSpec struct {
	// Addrs are the Redis the daemon uses (its redis_addrs); Masters the
	// masters whose INFO cpu is summed.
	Addrs, Masters []string
	// Prefix is the daemon's key_prefix: a message's key is
	// Prefix{user}, the daemon's Redis key of the user's rate key.
	Prefix string
	// Conns callers each send one call at a time, like the daemon's
	// connections; Keys users picked per Pick as in the daemon's cells.
	Conns, Keys int
	Pick        string
	Seed        uint64
	// Warmup is run first and not measured; then Duration is.
	Warmup, Duration time.Duration
	// Rate, if > 0, paces the callers together to this many messages a
	// second; 0: each sends its next call as soon as the last is
	// answered.
	Rate float64
}

// redisFloorResult is what a run of the Redis floor measured.
type redisFloorResult struct {
	Messages int64         // script calls answered in the measured window, one per message
	CPU      float64       // Redis CPU (used_cpu_user + used_cpu_sys, s) over the window, all masters
	Elapsed  time.Duration // length of the measured window
	Errors   int64         // calls that failed (each ends its caller)
	FirstErr error
}

// MessageRate is the messages a second of the measured window.
func (r redisFloorResult) MessageRate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

// CPUPerMessage is Redis's CPU per message in µs; ok is false when
// nothing was measured.
func (r redisFloorResult) CPUPerMessage() (usec float64, ok bool) {
	if r.Messages <= 0 || r.CPU <= 0 {
		return 0, false
	}
	return r.CPU * 1e6 / float64(r.Messages), true
}

// floorKey is the Redis key of user n under prefix, as the daemon writes
// it for the default stack's sasl_username limits.
func floorKey(prefix string, n int) string { return prefix + "{" + userName(n) + "}" }

// runRedisFloor performs spec: Conns goroutines send the empty script
// through one rueidis client until the warm-up and the measured window
// have passed; Redis's CPU is read from every master at the window's
// start and end.
func runRedisFloor(ctx context.Context, spec redisFloorSpec) (redisFloorResult, error) {
	var res redisFloorResult
	if spec.Conns < 1 || spec.Keys < 1 || spec.Duration <= 0 || len(spec.Addrs) == 0 || len(spec.Masters) == 0 {
		return res, errors.New("redis floor: Conns, Keys, Duration, Addrs and Masters are required")
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: spec.Addrs, DisableCache: true,
		DisableRetry: true, MaxFlushDelay: 20 * time.Microsecond})
	if err != nil {
		return res, fmt.Errorf("redis floor: %w", err)
	}
	defer c.Close()
	script := rueidis.NewLuaScript(floorScript)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		answered, errs atomic.Int64
		firstErr       error
		errOnce        sync.Once
		wg             sync.WaitGroup
	)
	for i := range spec.Conns {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(spec.Seed, uint64(i)))
			next := i
			keys := make([]string, 1)
			var interval time.Duration
			if spec.Rate > 0 {
				interval = time.Duration(float64(spec.Conns) / spec.Rate * 1e9)
			}
			// Each caller's calls are interval apart, the callers
			// spread over the first interval.
			due := time.Now().Add(interval * time.Duration(i) / time.Duration(spec.Conns))
			for runCtx.Err() == nil {
				if interval > 0 {
					if wait := time.Until(due); wait > 0 && sleepCtx(runCtx, wait) != nil {
						return
					}
					due = due.Add(interval)
					if now := time.Now(); due.Before(now) {
						due = now // behind: no burst to catch up
					}
				}
				user := rng.IntN(spec.Keys)
				if spec.Pick == pickRoundRobin {
					user, next = next%spec.Keys, (next+spec.Conns)%spec.Keys
				}
				keys[0] = floorKey(spec.Prefix, user)
				if err := script.Exec(runCtx, c, keys, nil).Error(); err != nil {
					if runCtx.Err() == nil {
						errs.Add(1)
						errOnce.Do(func() { firstErr = err })
					}
					return
				}
				answered.Add(1)
			}
		})
	}
	measured := func() error {
		if err := sleepCtx(ctx, spec.Warmup); err != nil {
			return err
		}
		cpu0, err := redisCPU(spec.Masters)
		if err != nil {
			return err
		}
		n0, t0 := answered.Load(), time.Now()
		if err := sleepCtx(ctx, spec.Duration); err != nil {
			return err
		}
		cpu1, err := redisCPU(spec.Masters)
		if err != nil {
			return err
		}
		res.Messages, res.Elapsed, res.CPU = answered.Load()-n0, time.Since(t0), cpu1-cpu0
		return nil
	}
	err = measured()
	stop()
	wg.Wait()
	res.Errors, res.FirstErr = errs.Load(), firstErr
	if err != nil {
		return res, fmt.Errorf("redis floor: %w", err)
	}
	return res, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// floorLine compares the daemon's Redis CPU per message over its runs of
// (conns, keys) with the Redis floor's at the same C and K, over masters
// masters; paced, if not "", says how the floor was paced. It returns
// the line and the ratio, 0 when a side was not measured.
func floorLine(conns, keys, masters int, paced string, floor redisFloorResult, d redisCost) (line string, ratio float64) {
	where := fmt.Sprintf("redis floor C=%d K=%d", conns, keys)
	if masters > 1 {
		where += fmt.Sprintf(" (%d masters)", masters)
	}
	if paced != "" {
		where += " " + paced
	}
	f, okF := floor.CPUPerMessage()
	y, okD := d.CPUPerMessage()
	if !okF || !okD {
		return where + ": not measured (no Redis CPU or no messages)", 0
	}
	ratio = y / f
	line = fmt.Sprintf("%s: one empty EVALSHA per message: %.1f µs Redis CPU per message (%s messages/s); ratelimitd: %.1f µs per message (%s messages/s), Y/X = %.2f×",
		where, f, thousands(int64(floor.MessageRate()+0.5)), y, thousands(int64(d.MessageRate()+0.5)), ratio)
	if floor.Errors > 0 {
		line += fmt.Sprintf(" (floor: %d failed calls, first: %v)", floor.Errors, floor.FirstErr)
	}
	return line, ratio
}

// floorTarget checks ratio, the daemon's Redis CPU per message over the
// Redis floor's paced to the daemon's messages a second, at C=64,
// K=100,000 (on masters masters): the
// line ("" at another C or K, or with nothing measured) and whether the
// target was missed.
func floorTarget(conns, keys, masters int, ratio float64) (line string, missed bool) {
	if conns != targetConns || keys != targetKeys || ratio <= 0 {
		return "", false
	}
	target := targetRedisFloor
	if masters > 1 {
		target = targetRedisFloorCluster
	}
	ok := ratio <= target
	return fmt.Sprintf("redis floor target C=%d K=%d: ratelimitd/floor %s <= %.1f %s", conns, keys,
		against(ratio, target), target, verdict(ok)), !ok
}
