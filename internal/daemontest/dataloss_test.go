//go:build integration

package daemontest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
)

// burstUsers is the number of users of each repetition below.
const burstUsers = 1000

// runBurst sends rounds messages of each of name's users, each through a
// daemon picked at random, waits until the burst ends by itself and
// checks that every request was answered in time.
func runBurst(t *testing.T, ds []*daemon, name string, rounds int64) *load {
	t.Helper()
	l := startLoadOf(t, &load{daemons: ds, users: burstUsers, maxRounds: rounds, name: name, random: true}, loadGoroutines)
	l.wg.Wait()
	l.checkAnswers(t)
	return l
}

// degradedSeconds is each daemon's time spent degraded, failing the test
// on a daemon that is degraded now.
func degradedSeconds(t *testing.T, ds []*daemon, when string) []float64 {
	t.Helper()
	secs := make([]float64, len(ds))
	for i, d := range ds {
		st, err := d.status()
		if err != nil || st.Store == nil {
			t.Fatalf("daemon %d status: %v", i, err)
		}
		if st.Store.Degraded {
			t.Errorf("daemon %d degraded %s: %+v", i, when, *st.Store)
		}
		secs[i] = st.Store.DegradedSeconds
	}
	return secs
}

// TestDaemonsRedisFlushall: 1,000 users send 20 messages each (the limit)
// through two daemons picked at random per message; then FLUSHALL, and
// 20 more each. The daemons restore what Redis lost from their own
// copies, every copy once the first loss is seen: at most one message
// per host gets through after the flush (without the restore each user
// got nearly all 20; restoring each state only at its sender's next
// message through the host gave up to 6, the first host reached holding
// an older copy than the other). Both daemons stay shared. Repeated 5
// times.
func TestDaemonsRedisFlushall(t *testing.T) {
	srv := redistest.Start(t)
	ds := startPair(t, redisStore([]string{srv.Addr}, ""))
	for rep := range 5 {
		name := fmt.Sprintf("flush%d-", rep)
		runBurst(t, ds, name, hourlyLimit)
		srv.Must("FLUSHALL")
		after := runBurst(t, ds, name, hourlyLimit)
		most, mean := after.admittedStats()
		hist := map[int32]int{}
		for u := range after.admitted {
			hist[after.admitted[u].Load()]++
		}
		t.Logf("repetition %d: after FLUSHALL, admitted per user: max %d, mean %.2f; users by messages admitted: %v", rep, most, mean, hist)
		if most > len(ds) {
			t.Errorf("repetition %d: after FLUSHALL, up to %d messages of a user got through (mean %.2f), want at most one per host, %d",
				rep, most, mean, len(ds))
		}
		degradedSeconds(t, ds, "after FLUSHALL")
	}
}

// TestDaemonsRedisRestartedIdle: Redis SIGKILLed and started again on the
// same port, empty (no persistence), while the two daemons are idle with
// connections to the old process; then a burst through daemons picked at
// random of the users who had sent half the limit before (their states
// restored from the hosts' copies) and of as many new users. Every
// request is answered in time; both daemons are shared when the burst
// ends, after at most 2s degraded each; nobody gets more than splitBound
// in all, and the new users on average not more than the limit plus one
// message per host. Repeated 5 times.
func TestDaemonsRedisRestartedIdle(t *testing.T) {
	srv := redistest.Start(t)
	ds := startPair(t, redisStore([]string{srv.Addr}, ""))
	for rep := range 5 {
		old, fresh := fmt.Sprintf("idle%d-", rep), fmt.Sprintf("new%d-", rep)
		before := runBurst(t, ds, old, hourlyLimit/2)
		was := degradedSeconds(t, ds, "before the restart")
		srv.Restart()
		time.Sleep(500 * time.Millisecond) // idle, Redis answering
		answered := time.Now()
		var loads [2]*load
		var wg sync.WaitGroup
		for i, name := range []string{old, fresh} {
			wg.Go(func() { loads[i] = runBurst(t, ds, name, hourlyLimit) })
		}
		wg.Wait()
		took := time.Since(answered)
		most, total := 0, 0
		for u := range burstUsers {
			n := int(before.admitted[u].Load() + loads[0].admitted[u].Load())
			most, total = max(most, n), total+n
		}
		newMost, newMean := loads[1].admittedStats()
		degraded := degradedSeconds(t, ds, "after the burst")
		for i := range degraded {
			degraded[i] -= was[i]
		}
		t.Logf("repetition %d: burst of %v; old users admitted max %d, mean %.2f; new users max %d, mean %.2f; degraded %.2fs per daemon",
			rep, took.Round(time.Millisecond), most, float64(total)/burstUsers, newMost, newMean, degraded)
		if most > splitBound || newMost > splitBound {
			t.Errorf("repetition %d: a user admitted %d (old) or %d (new) messages, over the bound %d", rep, most, newMost, splitBound)
		}
		if newMean > hourlyLimit+float64(len(ds)) {
			t.Errorf("repetition %d: new users admitted %.2f on average, want at most the limit + one per host", rep, newMean)
		}
		for i, sec := range degraded {
			if sec > 2 {
				t.Errorf("repetition %d: daemon %d was degraded %.2fs after the restart, want at most 2s", rep, i, sec)
			}
		}
	}
}
