//go:build integration

package daemontest

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// Every scenario: 2 daemons (degraded_share = "split", redis_hosts = 2),
// repeated reps times on the same daemons and Redis with fresh users
// each time (the failures guarded against are races): users users
// sending from loadGoroutines goroutines (about 20,000 requests a second
// on 2 cores, a round of every user in about 0.1s), each message through
// a daemon picked at random, warmRounds rounds before the fault (every
// user at half the limit), and in all at least totalRounds (past the
// limit: the bound is tested). The bound with split (docs/redis.md) is
// L + (N-1)/N of what the sender had sent when the outage began: each
// host's copy is as old as the sender's last message through it. A user
// at the limit may get L/2 more through 2 hosts.
const (
	reps           = 5
	users          = 2000
	loadGoroutines = 16
	warmRounds     = 10
	totalRounds    = 30
	maxRounds      = 200 // the load ends by itself
	splitBound     = hourlyLimit + hourlyLimit/2
)

// startPair starts the two daemons on store, alone with the other
// packages' load tests (the latency budget is the daemons', not the
// machine's).
func startPair(t *testing.T, store string) []*daemon {
	t.Helper()
	redistest.Exclusive(t)
	return []*daemon{startDaemon(t, store), startDaemon(t, store)}
}

// repeat runs scenario reps times as subtests, each with its own users
// (named by the name given).
func repeat(t *testing.T, scenario func(t *testing.T, name string)) {
	t.Helper()
	for rep := range reps {
		t.Run(fmt.Sprintf("rep%d", rep), func(t *testing.T) { scenario(t, fmt.Sprintf("r%duser", rep)) })
	}
}

// checkAdmitted asserts that no user was admitted more than bound and
// logs the figures.
func checkAdmitted(t *testing.T, l *load, bound int) {
	t.Helper()
	most, mean := l.admittedStats()
	over := map[int32]int{} // users by messages admitted, above the limit
	for i := range l.admitted {
		if a := l.admitted[i].Load(); a > hourlyLimit {
			over[a]++
		}
	}
	t.Logf("admitted per user: max %d, mean %.2f (limit %d, bound %d); users over the limit by messages admitted: %v",
		most, mean, hourlyLimit, bound, over)
	if most > bound {
		n := 0
		for i := range l.admitted {
			if int(l.admitted[i].Load()) > bound {
				n++
			}
		}
		t.Errorf("%d users admitted more than the bound %d, the most %d", n, bound, most)
	}
}

// outageCounts are a daemon's counters checkOneOutage compares.
type outageCounts struct{ switches, recoveries, local, merges int64 }

// counts reads each daemon's outage counters.
func counts(t *testing.T, ds []*daemon) []outageCounts {
	t.Helper()
	c := make([]outageCounts, len(ds))
	for i, d := range ds {
		st, err := d.status()
		if err != nil || st.Store == nil {
			t.Fatalf("daemon %d status: %v", i, err)
		}
		s := st.Store
		c[i] = outageCounts{s.Switches, s.Recoveries, 0, s.Merges}
		for _, n := range s.LocalDecisions {
			c[i].local += n
		}
	}
	return c
}

// checkOneOutage asserts that each daemon is shared now and, since
// before, went degraded once and recovered once (no flapping), decided
// locally meanwhile and added its outage counts to Redis.
func checkOneOutage(t *testing.T, ds []*daemon, before []outageCounts) {
	t.Helper()
	now := counts(t, ds)
	for i, d := range ds {
		st, err := d.status()
		if err != nil || st.Store == nil {
			t.Errorf("daemon %d status: %v", i, err)
			continue
		}
		b, n := before[i], now[i]
		t.Logf("daemon %d: switches %d, recoveries %d, local decisions %d, merges %d (in all: degraded %.1fs, %d states merged, faults %d)",
			i, n.switches-b.switches, n.recoveries-b.recoveries, n.local-b.local, n.merges-b.merges,
			st.Store.DegradedSeconds, st.Store.StatesMerged, st.Faults)
		if st.Store.Degraded || n.switches-b.switches != 1 || n.recoveries-b.recoveries != 1 {
			t.Errorf("daemon %d: degraded %v, switches %d, recoveries %d; want shared after one outage and one recovery",
				i, st.Store.Degraded, n.switches-b.switches, n.recoveries-b.recoveries)
		}
		if n.local == b.local || n.merges == b.merges {
			t.Errorf("daemon %d decided %d requests locally and merged %d times, want some of both",
				i, n.local-b.local, n.merges-b.merges)
		}
	}
}

// checkBack asserts that the daemons were shared again within 2s of
// Redis answering.
func checkBack(t *testing.T, back time.Duration) {
	t.Helper()
	t.Logf("shared again %v after Redis answered", back.Round(time.Millisecond))
	if back > 2*time.Second {
		t.Errorf("shared again %v after Redis answered, want within 2s", back.Round(time.Millisecond))
	}
}

// faultUnderLoad runs the load of users named name on ds, runs fault
// after warmRounds (fault returns once Redis answers again), then
// checks: every request answered in time, nobody admitted over bound,
// shared again within 2s of Redis answering, one outage and one recovery
// per daemon. It returns the ended load for more checks.
func faultUnderLoad(t *testing.T, ds []*daemon, name string, bound int, fault func(l *load)) *load {
	t.Helper()
	return faultSince(t, ds, counts(t, ds), name, bound, fault)
}

// faultSince is faultUnderLoad counting the outage from before.
func faultSince(t *testing.T, ds []*daemon, before []outageCounts, name string, bound int, fault func(l *load)) *load {
	t.Helper()
	l := startLoadOf(t, &load{daemons: ds, users: users, name: name, maxRounds: maxRounds, random: true}, loadGoroutines)
	l.waitRounds(t, warmRounds)
	began := time.Since(l.started)
	fault(l)
	t.Logf("fault from %v to %v after the load began", began.Round(time.Millisecond), time.Since(l.started).Round(time.Millisecond))
	back := sharedAgain(t, ds, time.Now())
	l.waitRounds(t, 5)
	l.waitTotal(t, totalRounds)
	l.checkAnswers(t)
	checkAdmitted(t, l, bound)
	checkBack(t, back)
	checkOneOutage(t, ds, before)
	return l
}

// pause is the fault of SIGSTOP for 3s.
func pause(srv *redistest.Server) func(*load) {
	return func(*load) {
		srv.Stop()
		time.Sleep(3 * time.Second)
		srv.Resume()
	}
}

// TestDaemonsRedisPaused3s: Redis SIGSTOPped for 3s under the load of
// two daemon processes: every request answered within redis_timeout +
// 100ms, nobody admitted more than splitBound, both daemons shared again
// within 2s of SIGCONT, after one outage and one recovery each.
func TestDaemonsRedisPaused3s(t *testing.T) {
	srv := redistest.Start(t)
	ds := startPair(t, redisStore([]string{srv.Addr}, ""))
	repeat(t, func(t *testing.T, name string) { faultUnderLoad(t, ds, name, splitBound, pause(srv)) })
}

// TestDaemonsRedisPaused3sLastShare: TestDaemonsRedisPaused3s with the
// default degraded_share = "last": each daemon decides from what it last
// knew of each user, so nobody gets more than the documented bound for
// N hosts, N x the limit (docs/redis.md; the limit regained over 3s of a
// 1h period is 0.02 message), where hosts that started from zero gave
// every user the limit per host on top of what it had sent before.
func TestDaemonsRedisPaused3sLastShare(t *testing.T) {
	srv := redistest.Start(t)
	store := strings.Replace(redisStore([]string{srv.Addr}, ""), `degraded_share = "split"`, `degraded_share = "last"`, 1)
	ds := startPair(t, store)
	repeat(t, func(t *testing.T, name string) { faultUnderLoad(t, ds, name, 2*hourlyLimit, pause(srv)) })
}

// TestDaemonsRedisRestartedUnderLoad: Redis SIGKILLed (append-only file
// synced every second) and restarted on the same port 2s later under
// load; the time back is counted from when it answers PING (loaded).
// Same assertions as TestDaemonsRedisPaused3s.
func TestDaemonsRedisRestartedUnderLoad(t *testing.T) {
	srv := redistest.Start(t, "appendonly yes", "appendfsync everysec")
	ds := startPair(t, redisStore([]string{srv.Addr}, ""))
	repeat(t, func(t *testing.T, name string) {
		faultUnderLoad(t, ds, name, splitBound, func(*load) {
			srv.Kill()
			time.Sleep(2 * time.Second)
			srv.Restart()
		})
	})
}

// TestDaemonsSentinelMasterKilled: the Sentinel-managed master SIGKILLed
// under load; the daemons follow the promoted replica: answered in time,
// nobody over splitBound, shared within 2s of the promotion. The killed
// master is started again and rejoins as the replica before the next
// repetition.
func TestDaemonsSentinelMasterKilled(t *testing.T) {
	ss := redistest.StartSentinels(t)
	ds := startPair(t, redisStore(ss.Addrs(), ss.Name))
	repeat(t, func(t *testing.T, name string) {
		faultUnderLoad(t, ds, name, splitBound, func(*load) {
			ss.Master.Kill()
			waitUntil(t, 30*time.Second, "the sentinels to promote the replica", func() bool { return ss.MasterAddr() == ss.Replica.Addr })
		})
		ss.Master, ss.Replica = ss.Replica, ss.Master
		ss.Replica.Restart()
		// What the Sentinels do to a returning old master, at once.
		ss.Replica.Must("REPLICAOF", "127.0.0.1", strconv.Itoa(ss.Master.Port))
		waitUntil(t, 60*time.Second, "the old master to rejoin as the replica", func() bool {
			return strings.Contains(ss.Replica.Info("replication", "master_link_status"), "up")
		})
	})
}

// TestDaemonsStartWithoutRedis: two daemons start while nothing listens
// at the Redis address and serve every request (locally) under load;
// Redis then starts and both share its state within 2s, their outage
// counts added; nobody over splitBound.
func TestDaemonsStartWithoutRedis(t *testing.T) {
	redistest.Exclusive(t)
	repeat(t, func(t *testing.T, name string) {
		port := mtatest.FreePort(t)
		store := redisStore([]string{fmt.Sprintf("127.0.0.1:%d", port)}, "")
		ds := []*daemon{startDaemon(t, store), startDaemon(t, store)}
		for i, d := range ds {
			if st, err := d.status(); err != nil || st.Store == nil || !st.Store.Degraded || st.Store.Connected {
				t.Fatalf("daemon %d status before Redis runs: %v %+v", i, err, st.Store)
			}
		}
		var srv *redistest.Server
		// The outage began at the start: counted from zero.
		faultSince(t, ds, make([]outageCounts, len(ds)), name, splitBound, func(*load) { srv = redistest.StartOn(t, port) })
		if n := srv.Must("DBSIZE"); n == "0" {
			t.Errorf("Redis holds no state after the merges")
		}
	})
}

// clusterAddrs are the nodes' addresses.
func clusterAddrs(nodes []*redistest.Server) []string {
	var a []string
	for _, n := range nodes {
		a = append(a, n.Addr)
	}
	return a
}

// userSlotOwners is the index of the master serving the slot of each
// user named name.
func userSlotOwners(t *testing.T, nodes []*redistest.Server, name string) []int {
	t.Helper()
	slots := redistest.SlotOwners(nodes)
	if slots == nil {
		t.Fatal("no cluster node answers CLUSTER SLOTS")
	}
	owners := make([]int, users)
	for u := range owners {
		owners[u] = slots[redisstore.Slot(userName(name, u))]
	}
	return owners
}

// TestDaemonsClusterMasterKilled: one of 3 Cluster masters SIGKILLed
// under load (the cluster serves the other slots): the users of its
// slots are decided locally, at most splitBound;
// the others stay shared and get exactly the limit. The master then
// restarts and both daemons are shared again within 2s of it answering.
func TestDaemonsClusterMasterKilled(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	ds := startPair(t, redisStore(clusterAddrs(nodes), ""))
	repeat(t, func(t *testing.T, name string) {
		owners := userSlotOwners(t, nodes, name)
		l := faultUnderLoad(t, ds, name, splitBound, func(l *load) {
			nodes[2].Kill()
			waitUntil(t, 30*time.Second, "the dead master's slots decided locally", func() bool {
				for _, d := range ds {
					if st, err := d.status(); err != nil || st.Store == nil || st.Store.SlotsDown < 5000 {
						return false
					}
				}
				return true
			})
			l.waitTotal(t, totalRounds)
			nodes[2].Restart()
			// A restarted master answers PING at once but refuses commands
			// (CLUSTERDOWN) until its cluster state is ok, about 2s later
			// (Redis's rejoin delay, CLUSTER_WRITABLE_DELAY): it answers
			// from then.
			pinged := time.Now()
			waitUntil(t, 30*time.Second, "the restarted master's cluster state ok", func() bool {
				v, err := nodes[2].Do("CLUSTER", "INFO")
				return err == nil && strings.Contains(v, "cluster_state:ok")
			})
			t.Logf("the restarted master answered PING %v before its cluster state was ok", time.Since(pinged).Round(time.Millisecond))
		})
		dead, offLive := 0, 0
		for u, o := range owners {
			if o == 2 {
				dead++
			} else if a := l.admitted[u].Load(); a != hourlyLimit {
				offLive++
			}
		}
		t.Logf("%d users on the killed master, %d on the live ones", dead, users-dead)
		if dead == 0 || offLive != 0 {
			t.Errorf("%d users on the killed master; %d users on live masters admitted other than exactly %d", dead, offLive, hourlyLimit)
		}
	})
}

// TestDaemonsClusterReshard: 3,000 hash slots moved from one master to
// another with redis-cli --cluster reshard under load (back again in the
// next repetition): every request answered in time, the users whose slot
// stayed get exactly the limit, those whose slot moved at most
// splitBound, and neither daemon goes degraded.
func TestDaemonsClusterReshard(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found (run scripts/deps.sh): %v", err)
	}
	nodes := redistest.StartCluster(t, 3)
	ds := startPair(t, redisStore(clusterAddrs(nodes), ""))
	rep := 0
	repeat(t, func(t *testing.T, name string) {
		from, to := nodes[rep%2], nodes[(rep+1)%2]
		rep++
		before := userSlotOwners(t, nodes, name)
		l := startLoadOf(t, &load{daemons: ds, users: users, name: name, maxRounds: maxRounds, random: true}, loadGoroutines)
		l.waitRounds(t, warmRounds)
		start := time.Now()
		out, err := exec.Command(cli, "--cluster", "reshard", from.Addr, "--cluster-from", from.Must("CLUSTER", "MYID"),
			"--cluster-to", to.Must("CLUSTER", "MYID"), "--cluster-slots", "3000", "--cluster-yes").CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
		}
		took := time.Since(start)
		l.waitRounds(t, 5)
		l.waitTotal(t, totalRounds)
		l.checkAnswers(t)
		checkAdmitted(t, l, splitBound)
		after := userSlotOwners(t, nodes, name)
		moved, offStayed := 0, 0
		for u := range before {
			if before[u] != after[u] {
				moved++
			} else if l.admitted[u].Load() != hourlyLimit {
				offStayed++
			}
		}
		t.Logf("reshard of 3,000 slots took %v under load; %d users moved, %d stayed", took.Round(time.Millisecond), moved, users-moved)
		if moved == 0 || offStayed != 0 {
			t.Errorf("%d users moved; %d users whose slot stayed admitted other than exactly %d", moved, offStayed, hourlyLimit)
		}
		for i, d := range ds {
			st, err := d.status()
			if err != nil || st.Store == nil {
				t.Errorf("daemon %d status: %v", i, err)
				continue
			}
			t.Logf("daemon %d: switches %d, local decisions %v", i, st.Store.Switches, st.Store.LocalDecisions)
			if st.Store.Switches != 0 || st.Store.Degraded {
				t.Errorf("daemon %d went degraded during the reshard: %+v", i, st.Store)
			}
		}
	})
}
