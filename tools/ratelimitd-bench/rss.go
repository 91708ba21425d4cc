package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// rssPhase drives --rss-users distinct users into the daemon and reports
// its memory, and again after a restart with --rss-restart.
func (b *bench) rssPhase(ctx context.Context) (missed bool, err error) {
	o, d := b.o, b.daemon
	b.printf("\nRSS: %d distinct users, one END-OF-MESSAGE request each, C=%d, %d limits\n",
		o.rssUsers, rssConns, len(d.f.Limits))
	var redisBefore int64
	if o.backend == backendRedis {
		if redisBefore, _, err = redisMemory(b.redisNodes); err != nil {
			return false, fmt.Errorf("redis INFO: %w", err)
		}
	}
	// Bounded: even at 2,000 requests/s 1,000,000 users take 500 s.
	capDur := time.Duration(o.rssUsers/2000+60) * time.Second
	res, err := runLoad(ctx, loadSpec{Addr: d.addr, Conns: rssConns, Distinct: o.rssUsers, Duration: capDur, Seed: o.seed})
	if err != nil {
		return false, fmt.Errorf("rss load: %w", err)
	}
	b.printf("  load: %s requests in %s (%s req/s), p50 %s, p99 %s, %d errors\n", thousands(res.Requests),
		round(res.Elapsed), thousands(int64(res.Rate()+0.5)), latency(res.Hist.quantile(0.5)),
		latency(res.Hist.quantile(0.99)), res.Errors)
	if res.FirstErr != nil {
		b.printf("  first error: %v\n", res.FirstErr)
	}
	if res.Requests < int64(o.rssUsers) {
		b.printf("  warning: only %d of %d users answered\n", res.Requests, o.rssUsers)
	}
	waited, err := waitSettled(ctx, d.pid(), d.dbPath(), 3*time.Second, 2*time.Minute)
	if err != nil && ctx.Err() != nil {
		return false, err
	}
	settle := "flushed (database and CPU quiet for 3s)"
	if err != nil {
		settle = err.Error()
	}
	b.printf("  %s after %s\n", settle, round(waited))
	if keys, reqs, err := daemonStatus(ctx, d.adminSocket()); err == nil {
		b.printf("  daemon status: %s rate states tracked, %s requests answered since start\n", thousands(keys), thousands(reqs))
	}
	missed = b.printMem("after load", d)
	if o.backend == backendRedis {
		used, keys, err := redisMemory(b.redisNodes)
		if err != nil {
			return missed, fmt.Errorf("redis INFO: %w", err)
		}
		b.printf("  redis: used_memory %s (+%s), %s keys; %.0f bytes per user (%d limits), %.0f bytes per key\n",
			mib(used), mib(used-redisBefore), thousands(keys), float64(used-redisBefore)/float64(o.rssUsers),
			len(d.f.Limits), float64(used-redisBefore)/float64(max(keys, 1)))
	}
	if !o.rssRestart {
		return missed, nil
	}
	stopped, err := d.stop(30 * time.Second)
	if err != nil {
		return missed, fmt.Errorf("stop ratelimitd: %w%s", err, d.logTail())
	}
	took, err := d.start(ctx)
	if err != nil {
		return missed, fmt.Errorf("restart ratelimitd: %w", err)
	}
	b.printf("  restart: stopped (final flush) in %s, restored and listening in %s (pid %d)\n", round(stopped), round(took), d.pid())
	if keys, _, err := daemonStatus(ctx, d.adminSocket()); err == nil {
		b.printf("  daemon status: %s rate states restored\n", thousands(keys))
	}
	b.printMem("after restore", d)
	return missed, nil
}

// printMem prints the daemon's memory and database size, and checks the
// RSS target when 1,000,000 users were sent.
func (b *bench) printMem(when string, d *daemon) (missed bool) {
	m, ok := readMem(d.pid())
	if !ok {
		b.printf("  %s: RSS unavailable (no /proc)\n", when)
		return false
	}
	dbSize := "-"
	if fi, err := os.Stat(d.dbPath()); err == nil {
		dbSize = mib(fi.Size())
	}
	b.printf("  %s: VmRSS %s (anon %s, file %s), VmHWM %s; BoltDB %s\n", when, mib(m.RSS), mib(m.Anon),
		mib(m.File), mib(m.HWM), dbSize)
	if b.o.rssUsers == targetRSSUsers && when == "after load" {
		ok := m.RSS <= targetRSS
		b.printf("  target VmRSS <= %s after %d users: %s\n", mib(targetRSS), targetRSSUsers, verdict(ok))
		return !ok
	}
	return false
}
