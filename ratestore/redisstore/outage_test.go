//go:build integration

package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/redisstore"
)

// The outage tests run two hosts (two Failovers, each with its own local
// store, over one Redis) under load: users send messages in rounds, each
// round through the other host, against the default stack, 20/hour
// strict and 100/day leaky per user; Redis fails in the middle.
const (
	outageLimit   = 20
	outageTimeout = 200 * time.Millisecond
)

// outageStack is the default stack of user's message.
func outageStack(user string) []policy.StackItem {
	return []policy.StackItem{
		{Limit: "hourly", Key: user, Params: ratelimit.Limit{Limit: outageLimit, Period: time.Hour, Mode: ratelimit.Strict},
			Cost: 1, Count: true, Refuses: true},
		{Limit: "daily", Key: user, Params: ratelimit.Limit{Limit: 100, Period: 24 * time.Hour},
			Cost: 1, Count: true, Refuses: true},
	}
}

// outageHosts opens n Failovers on o, each over its own memory store,
// with a fast probe; split gives each limit/n while degraded.
func outageHosts(t *testing.T, o redisstore.Options, n int, split bool, connect bool) ([]*redisstore.Failover, []*mtatest.SyncBuffer) {
	t.Helper()
	redistest.Exclusive(t) // the load and its latency budget
	var fs []*redisstore.Failover
	var logs []*mtatest.SyncBuffer
	o.KeyPrefix = fmt.Sprintf("t%d:", prefixes.Add(1)) // shared by the hosts
	for range n {
		var r *redisstore.Store
		if connect {
			r = open(t, o)
		} else {
			var err error
			if r, err = redisstore.Open(o); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
		}
		buf := &mtatest.SyncBuffer{}
		f := redisstore.NewFailover(r, ratestore.NewMemory(ratestore.MemoryOptions{}), slog.New(slog.NewTextHandler(buf, nil)),
			redisstore.FailoverOptions{ProbeInterval: 50 * time.Millisecond, Split: split, Hosts: n})
		t.Cleanup(f.Close)
		fs = append(fs, f)
		logs = append(logs, buf)
	}
	return fs, logs
}

// outageLoad is a running load on the hosts.
type outageLoad struct {
	hosts    []*redisstore.Failover
	users    int
	admitted []atomic.Int32
	sent     atomic.Int64
	rounds   atomic.Int64 // rounds completed by every user
	failed   atomic.Int64
	slowest  atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
}

// startLoad runs g goroutines sending messages of users in rounds, round
// r of user u through host (u+r) % len(hosts), until stop.
func startLoad(hosts []*redisstore.Failover, users, g int) *outageLoad {
	l := &outageLoad{hosts: hosts, users: users, admitted: make([]atomic.Int32, users), stop: make(chan struct{})}
	var next atomic.Int64
	for range g {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			out := make([]policy.StackResult, 2)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				n := next.Add(1) - 1
				u, round := int(n%int64(users)), int(n/int64(users))
				if u == 0 {
					l.rounds.Store(int64(round))
				}
				f := hosts[(u+round)%len(hosts)]
				start := time.Now()
				err := f.EvaluateStack(context.Background(), start, outageStack(fmt.Sprintf("user%d@example.org", u)), false, out)
				if d := int64(time.Since(start)); d > l.slowest.Load() {
					l.slowest.Store(d)
				}
				l.sent.Add(1)
				// Paced (about 2,000 requests a second per goroutine):
				// load, without taking the machine.
				time.Sleep(500 * time.Microsecond)
				if err != nil {
					l.failed.Add(1)
					continue
				}
				if !(out[0].Err == nil && out[0].Result.Over) && !(out[1].Err == nil && out[1].Result.Over) {
					l.admitted[u].Add(1)
				}
			}
		}()
	}
	return l
}

// waitRounds waits until every user sent n more messages.
func (l *outageLoad) waitRounds(t *testing.T, n int64) {
	t.Helper()
	target := l.rounds.Load() + n
	waitUntil(t, fmt.Sprintf("%d rounds of load", n), func() bool { return l.rounds.Load() >= target })
}

func (l *outageLoad) meanAdmitted() float64 {
	sum := 0
	for i := range l.admitted {
		sum += int(l.admitted[i].Load())
	}
	return float64(sum) / float64(l.users)
}

// end stops the load and returns the most and the mean admitted per user.
func (l *outageLoad) end() (most int, mean float64) {
	close(l.stop)
	l.wg.Wait()
	sum := 0
	for i := range l.admitted {
		a := int(l.admitted[i].Load())
		sum += a
		most = max(most, a)
	}
	return most, float64(sum) / float64(l.users)
}

// shared waits until no host is degraded and returns how long it took
// from since.
func shared(t *testing.T, hosts []*redisstore.Failover, since time.Time) time.Duration {
	t.Helper()
	waitUntil(t, "every host shared again", func() bool {
		for _, f := range hosts {
			if f.Degraded() {
				return false
			}
		}
		return true
	})
	return time.Since(since)
}

// check asserts the outcome of an outage test: every request answered in
// time, nobody admitted over bound, back to shared within 2s.
func (l *outageLoad) check(t *testing.T, bound int, back time.Duration, logs []*mtatest.SyncBuffer) {
	t.Helper()
	most, mean := l.end()
	slowest := time.Duration(l.slowest.Load())
	t.Logf("%d users, %d requests, %d failed, slowest %v; admitted per user max %d mean %.1f (limit %d, bound %d); shared again %v after Redis answered",
		l.users, l.sent.Load(), l.failed.Load(), slowest.Round(time.Millisecond), most, mean, outageLimit, bound, back.Round(time.Millisecond))
	if l.failed.Load() != 0 {
		t.Errorf("%d requests unanswered", l.failed.Load())
	}
	// The budget is redis_timeout + 100 ms; the race detector (make test
	// runs with it, on two shared cores) slows a request's own work
	// several times, so there it gets 300 ms over redis_timeout: a
	// request that waited for Redis past redis_timeout still fails.
	slack := 100 * time.Millisecond
	if raceEnabled {
		slack = 300 * time.Millisecond
	}
	if slowest > outageTimeout+slack {
		t.Errorf("slowest request %v, want at most redis_timeout + %v", slowest, slack)
	}
	if most > bound {
		t.Errorf("a user was admitted %d messages, over the bound %d", most, bound)
	}
	if back > 2*time.Second {
		t.Errorf("shared again %v after Redis answered, want within 2s", back)
	}
	for i, b := range logs {
		s := b.String()
		if n := strings.Count(s, `msg="redis unavailable`); n != 1 {
			t.Errorf("host %d logged the switch %d times, want once:\n%s", i, n, s)
		}
		if n := strings.Count(s, `msg="redis available again`); n != 1 {
			t.Errorf("host %d logged the recovery %d times, want once:\n%s", i, n, s)
		}
	}
}

// TestOutagePausedRedisKeepsLimit: Redis SIGSTOPped for 3s under load.
// Each host decides from what it last knew of each user, not from zero:
// no user gets more than 2 x the limit (the default bound on 2 hosts)
// where hosts that started from zero gave the limit per host on top of
// what users had sent before; back on the shared state within 2s of
// SIGCONT, the outage's counts added.
func TestOutagePausedRedisKeepsLimit(t *testing.T) {
	srv := redistest.Start(t)
	hosts, logs := outageHosts(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: outageTimeout}, 2, false, true)
	l := startLoad(hosts, 2000, 8)
	l.waitRounds(t, 10)
	t.Logf("before: %v", l.meanAdmitted())
	srv.Stop()
	time.Sleep(3 * time.Second)
	t.Logf("during: %v", l.meanAdmitted())
	srv.Resume()
	back := shared(t, hosts, time.Now())
	t.Logf("after: %v", l.meanAdmitted())
	l.waitRounds(t, 5)
	l.check(t, 2*outageLimit, back, logs)
}

// TestOutageSplitShare: as TestOutagePausedRedisKeepsLimit with
// degraded_share = "split": each of the 2 hosts gets half the limit while
// degraded, so nobody gets more than the limit + one message per host.
func TestOutageSplitShare(t *testing.T) {
	srv := redistest.Start(t)
	standaloneOutage(t, srv, true, outageLimit+2, func() {
		srv.Stop()
		time.Sleep(3 * time.Second)
		srv.Resume()
	})
}

// standaloneOutage runs the load on two hosts over srv (split or not),
// runs fault (which returns once Redis answers again) after 6 rounds,
// and checks the outcome against bound.
func standaloneOutage(t *testing.T, srv *redistest.Server, split bool, bound int, fault func()) {
	t.Helper()
	hosts, logs := outageHosts(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: outageTimeout}, 2, split, true)
	l := startLoad(hosts, 2000, 8)
	l.waitRounds(t, 6)
	fault()
	back := shared(t, hosts, time.Now())
	l.waitRounds(t, 5)
	l.check(t, bound, back, logs)
}

// TestOutageRedisDown10s: Redis killed (SIGKILL, its append-only file
// synced every second) and restarted 10s later under load; while it
// loads it is not up. Nobody gets more than the limit + one message per
// host with split; back within 2s of Redis answering.
func TestOutageRedisDown10s(t *testing.T) {
	srv := redistest.Start(t, "appendonly yes", "appendfsync everysec")
	standaloneOutage(t, srv, true, outageLimit+2, func() {
		srv.Kill()
		time.Sleep(10 * time.Second)
		srv.Restart()
	})
}

// TestOutageSentinelFailover: the Sentinel-managed master SIGKILLed under
// load; the hosts follow the promoted replica. Nobody gets more than the
// limit + one message per host (split).
func TestOutageSentinelFailover(t *testing.T) {
	ss := redistest.StartSentinels(t)
	hosts, logs := outageHosts(t, redisstore.Options{Addrs: ss.Addrs(), SentinelMaster: ss.Name, Timeout: outageTimeout}, 2, true, true)
	l := startLoad(hosts, 2000, 8)
	l.waitRounds(t, 6)
	ss.Master.Kill()
	waitUntil(t, "the sentinels to promote the replica", func() bool { return ss.MasterAddr() == ss.Replica.Addr })
	back := shared(t, hosts, time.Now())
	l.waitRounds(t, 5)
	l.check(t, outageLimit+2, back, logs)
}

// TestOutageStartWithoutRedis: two hosts start while nothing listens at
// the Redis address and serve (locally) under load; Redis then starts and
// both share its state within 2s, the counts of the outage added.
func TestOutageStartWithoutRedis(t *testing.T) {
	port := mtatest.FreePort(t)
	hosts, logs := outageHosts(t, redisstore.Options{Addrs: []string{fmt.Sprintf("127.0.0.1:%d", port)}, Timeout: outageTimeout},
		2, true, false)
	for _, f := range hosts {
		if st := f.Status(); !st.Degraded || st.Connected {
			t.Fatalf("status before Redis runs: %+v", st)
		}
	}
	l := startLoad(hosts, 2000, 8)
	l.waitRounds(t, 3)
	srv := redistest.StartOn(t, port)
	back := shared(t, hosts, time.Now())
	l.waitRounds(t, 5)
	l.check(t, outageLimit+2, back, logs)
	// The hosts' outage counts were added: Redis knows every user.
	if n := srv.Must("DBSIZE"); n == "0" {
		t.Errorf("Redis holds no state after the merge")
	}
}

// TestOutageClusterMasterKilled: one of 3 cluster masters SIGKILLed under
// load (the cluster keeps serving the other slots): only the users whose
// slots it served are decided locally; the others stay shared and get
// exactly the limit. Nobody gets more than the limit + one message per
// host (split).
func TestOutageClusterMasterKilled(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	hosts, _ := outageHosts(t, redisstore.Options{Addrs: addrs, Timeout: outageTimeout}, 2, true, true)
	l := startLoad(hosts, 2000, 8)
	l.waitRounds(t, 6)
	nodes[2].Kill()
	waitUntil(t, "the dead master's slots decided locally", func() bool {
		for _, f := range hosts {
			if n := f.Status().SlotsDown; n < 5000 {
				return false
			}
		}
		return true
	})
	l.waitRounds(t, 18) // past the limit
	most, mean := l.end()
	dead := map[bool][]int{}
	for u := range l.users {
		owner := ownedBy(nodes, redisstore.Slot(fmt.Sprintf("user%d@example.org", u))) == 2
		dead[owner] = append(dead[owner], int(l.admitted[u].Load()))
	}
	// A live master's user is decided locally only when its own call
	// failed (timed out on a busy machine): then it may get one message
	// per host more, as any degraded user; else exactly the limit.
	var failedCalls int64
	for _, f := range hosts {
		failedCalls += f.LocalDecisions()["failed"]
	}
	for owner, as := range dead {
		sort.Ints(as)
		t.Logf("users on the dead master %v: %d, admitted max %d", owner, len(as), as[len(as)-1])
		if !owner && as[len(as)-1] != outageLimit && (failedCalls == 0 || as[len(as)-1] > outageLimit+2) {
			t.Errorf("users on live masters admitted up to %d, want exactly %d (%d requests decided locally after their own call failed)",
				as[len(as)-1], outageLimit, failedCalls)
		}
	}
	t.Logf("%d requests, %d failed, slowest %v; admitted max %d mean %.1f; slots down %d; %d decided locally after their own call failed",
		l.sent.Load(), l.failed.Load(), time.Duration(l.slowest.Load()).Round(time.Millisecond), most, mean, hosts[0].Status().SlotsDown, failedCalls)
	slack := 100 * time.Millisecond
	if raceEnabled {
		slack = 300 * time.Millisecond // as in check
	}
	if l.failed.Load() != 0 || time.Duration(l.slowest.Load()) > outageTimeout+slack {
		t.Errorf("%d requests unanswered, slowest %v", l.failed.Load(), time.Duration(l.slowest.Load()))
	}
	if most > outageLimit+2 {
		t.Errorf("a user was admitted %d messages, over the bound %d", most, outageLimit+2)
	}
}

// ownedBy returns the index of the node serving slot (per CLUSTER SLOTS
// of the first node).
func ownedBy(nodes []*redistest.Server, slot uint16) int {
	v, err := nodes[0].Do("CLUSTER", "SLOTS") // a live node
	if err != nil {
		return -1
	}
	// Flattened: start, end, host, port, id, [replicas...] per range;
	// only masters here, so 5 values per range.
	f := strings.Split(v, "\n")
	for i := 0; i+4 < len(f); i += 5 {
		var lo, hi, port int
		fmt.Sscan(f[i], &lo)
		fmt.Sscan(f[i+1], &hi)
		fmt.Sscan(f[i+3], &port)
		if int(slot) >= lo && int(slot) <= hi {
			for j, n := range nodes {
				if n.Port == port {
					return j
				}
			}
		}
	}
	return -1
}

// TestOutageCountsAdded: 15 messages on each of two hosts during an
// outage become 30 more in Redis (added, not the stricter one kept), so the
// user is refused afterwards on both hosts; the merge is logged once.
func TestOutageCountsAdded(t *testing.T) {
	srv := redistest.Start(t)
	hosts, _ := outageHosts(t, redisstore.Options{Addrs: []string{srv.Addr}, Timeout: outageTimeout}, 2, false, true)
	out := make([]policy.StackResult, 2)
	send := func(f *redisstore.Failover) bool {
		if err := f.EvaluateStack(context.Background(), time.Now(), outageStack("zoe"), false, out); err != nil {
			t.Fatal(err)
		}
		return !out[0].Result.Over && !out[1].Result.Over
	}
	send(hosts[0])
	srv.Stop()
	for _, f := range hosts {
		for range 15 {
			send(f)
		}
	}
	srv.Resume()
	shared(t, hosts, time.Now())
	waitUntil(t, "the merges", func() bool {
		a, _ := hosts[0].Merges()
		b, _ := hosts[1].Merges()
		return a == 1 && b == 1
	})
	st, err := hosts[0].Get(context.Background(), "hourly", "zoe")
	// Each host's first request of the outage timed out in Redis's
	// queue and was decided locally; Redis ran it when it resumed: counted
	// twice (stricter, never looser).
	if err != nil || st.Rate < 30.9 || st.Rate > 33.1 {
		t.Errorf("zoe's hourly rate in Redis after the outage: %+v (%v), want 31 (1 + 15 + 15; up to 33)", st, err)
	}
	for i, f := range hosts {
		if send(f) {
			t.Errorf("host %d admits zoe after 31 messages in the hour", i)
		}
	}
}

// TestOutageMergeSurvivesRestart: a host stopped while degraded keeps its
// outage counts in the pending file; a new process over the same file
// adds them to Redis once Redis answers, and a third one (the merge
// retried with the same file, as after a crash before it was removed)
// adds nothing twice.
func TestOutageMergeSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t)
	o := redisstore.Options{Addrs: []string{srv.Addr}, Timeout: outageTimeout, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1))}
	path := t.TempDir() + "/outage.json"
	newHost := func() *redisstore.Failover {
		r := open(t, o)
		f := redisstore.NewFailover(r, ratestore.NewMemory(ratestore.MemoryOptions{}), slog.New(slog.DiscardHandler),
			redisstore.FailoverOptions{ProbeInterval: 20 * time.Millisecond})
		if err := f.LoadPending(path); err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := newHost()
	out := make([]policy.StackResult, 2)
	srv.Stop()
	for range 5 {
		f.EvaluateStack(context.Background(), time.Now(), outageStack("yann"), false, out)
	}
	f.Close() // degraded: the counts go to the file
	srv.Resume()
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no pending file after a degraded stop: %v", err)
	}
	g := newHost()
	waitUntil(t, "the pending merge", func() bool { n, _ := g.Merges(); return n == 1 })
	g.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("pending file left after the merge: %v", err)
	}
	// A crash between the merge and the file's removal: the same merge
	// again.
	if err := os.WriteFile(path, saved, 0o600); err != nil {
		t.Fatal(err)
	}
	h := newHost()
	waitUntil(t, "the repeated merge", func() bool { n, _ := h.Merges(); return n == 1 })
	h.Close()
	st, err := h.Get(context.Background(), "hourly", "yann")
	if err != nil || st.Rate < 4.99 || st.Rate > 5.01 {
		t.Errorf("yann's hourly rate after a merge and its repetition: %+v (%v), want 5", st, err)
	}
}

// TestBadStateIsItsKeysProblem: a value no decision script wrote, under
// one user's key (the record of all its limits), counts as no state for
// that key alone (reported once per limit through OnBadState): the
// request is decided from none, and the host restores the key's states
// from its own copy, as after any loss; other users are decided as
// usual, and the store stays shared.
func TestBadStateIsItsKeysProblem(t *testing.T) {
	srv := redistest.Start(t)
	var bad []string
	var mu sync.Mutex
	o := redisstore.Options{Addrs: []string{srv.Addr}, Timeout: outageTimeout, KeyPrefix: fmt.Sprintf("t%d:", prefixes.Add(1)),
		OnBadState: func(limit, key string) { mu.Lock(); bad = append(bad, limit+" "+key); mu.Unlock() }}
	r := open(t, o)
	f := redisstore.NewFailover(r, ratestore.NewMemory(ratestore.MemoryOptions{}), slog.New(slog.DiscardHandler), redisstore.FailoverOptions{})
	t.Cleanup(f.Close)
	out := make([]policy.StackResult, 2)
	for range 30 {
		f.EvaluateStack(context.Background(), time.Now(), outageStack("bad2@x.org"), false, out)
		f.EvaluateStack(context.Background(), time.Now(), outageStack("good@x.org"), false, out)
	}
	srv.Must("SET", r.Key("bad2@x.org"), "xyz")
	if err := f.EvaluateStack(context.Background(), time.Now(), outageStack("bad2@x.org"), false, out); err != nil {
		t.Fatalf("request of the user with a bad state: %v", err)
	}
	// Both limits start afresh (1 message, admitted).
	if out[0].Err != nil || out[0].Result.Over || out[0].Result.Rate > 1.01 || out[1].Err != nil || out[1].Result.Rate > 1.01 {
		t.Errorf("bad state's request: hourly %+v, daily %+v", out[0], out[1])
	}
	if err := f.EvaluateStack(context.Background(), time.Now(), outageStack("good@x.org"), false, out); err != nil || !out[0].Result.Over {
		t.Errorf("another user's request beside the bad state: %v, %+v", err, out[0])
	}
	if f.Degraded() {
		t.Errorf("the store went degraded over one bad value: %+v", f.Status())
	}
	if got, err := r.Get(context.Background(), "daily", "bad2@x.org"); err != nil || got.Rate < 20.9 || got.Rate > 21.1 {
		t.Errorf("the bad value was not replaced by the host's copy and the new message: daily %+v, %v, want 21 (the copy's 20 and this message)", got, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) != 2 || bad[0] != "hourly bad2@x.org" || bad[1] != "daily bad2@x.org" {
		t.Errorf("OnBadState calls: %q, want hourly and daily of bad2@x.org", bad)
	}
}

// TestClusterReshardUnderLoad: 3,000 hash slots moved from one master to
// another with redis-cli --cluster reshard while two hosts send load (one
// call per request and slot, routed by rueidis): every request is
// answered within redis_timeout + 100 ms, the users whose slots did not move get exactly
// the limit and those whose slots moved at most the limit + one message
// per host (split), and the store never goes degraded.
func TestClusterReshardUnderLoad(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not found")
	}
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	owner := make([]int, 2000)
	for u := range owner {
		owner[u] = ownedBy(nodes, redisstore.Slot(fmt.Sprintf("user%d@example.org", u)))
	}
	hosts, _ := outageHosts(t, redisstore.Options{Addrs: addrs, Timeout: outageTimeout}, 2, true, true)
	l := startLoad(hosts, 2000, 8)
	l.waitRounds(t, 4)
	from, to := nodes[0].Must("CLUSTER", "MYID"), nodes[1].Must("CLUSTER", "MYID")
	start := time.Now()
	out, err := exec.Command(cli, "--cluster", "reshard", nodes[0].Addr, "--cluster-from", from, "--cluster-to", to,
		"--cluster-slots", "3000", "--cluster-yes").CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out)
	}
	took := time.Since(start)
	l.waitRounds(t, 22) // past the limit
	most, mean := l.end()
	moved, stayed, overMoved, offStayed := 0, 0, 0, 0
	for u := range owner {
		a := int(l.admitted[u].Load())
		if owner[u] == 0 && ownedBy(nodes, redisstore.Slot(fmt.Sprintf("user%d@example.org", u))) == 1 {
			moved++
			if a > outageLimit+2 {
				overMoved++
			}
			continue
		}
		stayed++
		if a != outageLimit {
			offStayed++
		}
	}
	if overMoved > 0 || offStayed > 0 {
		t.Errorf("%d users whose slot moved admitted more than %d; %d whose slot stayed admitted other than %d",
			overMoved, outageLimit+2, offStayed, outageLimit)
	}
	local := int64(0)
	for _, f := range hosts {
		for _, n := range f.LocalDecisions() {
			local += n
		}
		if st := f.Status(); st.Switches != 0 {
			t.Errorf("the store went degraded during the reshard: %+v", st)
		}
	}
	t.Logf("reshard of 3,000 slots took %v; %d users moved, %d stayed; %d requests, %d failed, %d decided locally, slowest %v; admitted max %d mean %.1f",
		took.Round(time.Millisecond), moved, stayed, l.sent.Load(), l.failed.Load(), local,
		time.Duration(l.slowest.Load()).Round(time.Millisecond), most, mean)
	if moved == 0 {
		t.Errorf("no user's slot moved")
	}
	if l.failed.Load() != 0 || time.Duration(l.slowest.Load()) > outageTimeout+100*time.Millisecond {
		t.Errorf("%d requests unanswered, slowest %v", l.failed.Load(), time.Duration(l.slowest.Load()))
	}
}
