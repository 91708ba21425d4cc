//go:build integration

package daemontest

import (
	"fmt"
	"testing"

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

// degradedSeconds sums the daemons' time spent degraded, failing the test
// on a daemon that is degraded now.
func degradedSeconds(t *testing.T, ds []*daemon, when string) float64 {
	t.Helper()
	sum := 0.0
	for i, d := range ds {
		st, err := d.status()
		if err != nil || st.Store == nil {
			t.Fatalf("daemon %d status: %v", i, err)
		}
		if st.Store.Degraded {
			t.Errorf("daemon %d degraded %s: %+v", i, when, *st.Store)
		}
		sum += st.Store.DegradedSeconds
	}
	return sum
}

// TestDaemonsRedisFlushall: 1,000 users send 20 messages each (the limit)
// through two daemons picked at random per message; then FLUSHALL, and
// 20 more each. The daemons restore what Redis lost from their own
// copies: on average at most one message per host gets through after
// the flush, and nobody gets half the limit (before the restore each
// user got nearly all 20). More than one per host gets through when the
// first host a user reaches holds an older copy than the other: until
// the other restores the difference, Redis admits from the older one.
// Both daemons stay shared. Repeated 5 times.
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
		if mean > float64(len(ds)) || most >= hourlyLimit/2 {
			t.Errorf("repetition %d: after FLUSHALL, %.2f messages per user on average got through (want at most one per host, %d) and at most %d (want under %d)",
				rep, mean, len(ds), most, hourlyLimit/2)
		}
		degradedSeconds(t, ds, "after FLUSHALL")
	}
}
