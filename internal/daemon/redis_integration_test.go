//go:build integration

package daemon

import (
	"bufio"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
)

// redisLimit is the default hourly limit at 20 an hour (leaky, per SASL
// user), alone.
var redisLimit = strings.Replace(testLimits[:strings.Index(testLimits, "\n[[limit]]\nname = \"daily\"")], "limit = 200", "limit = 20", 1)

// redisConfig is a [store] table on the Redis at addr (key prefix
// "it:", timeout 2s) with onError, and redisLimit.
func redisConfig(addr, onError string) string {
	return fmt.Sprintf("[store]\nbackend = \"redis\"\nredis_addrs = [%q]\nredis_timeout = \"2s\"\non_redis_error = %q\nkey_prefix = \"it:\"\n%s", addr, onError, redisLimit)
}

// TestRedisDownDefer: with on_redis_error = "defer" a request Redis cannot
// answer gets 450 4.7.1; with "dunno", DUNNO; both are counted as faults.
func TestRedisDownDefer(t *testing.T) {
	for _, c := range []struct{ policy, want string }{{"defer", "action=450 4.7.1"}, {"dunno", "action=DUNNO"}} {
		srv := redistest.Start(t)
		dir := t.TempDir()
		td := startTestDaemon(t, testConfig(t, dir, loopback(t), redisConfig(srv.Addr, c.policy)))
		if got := td.message("vera", "RCPT"); got != "action=DUNNO" {
			t.Fatalf("%s: with Redis up: %s", c.policy, got)
		}
		srv.Kill()
		if got := td.message("vera", "RCPT"); !strings.HasPrefix(got, c.want) {
			t.Errorf("on_redis_error=%s, Redis down: %s, want %s", c.policy, got, c.want)
		}
		st := td.Status()
		if st.Store == nil || !st.Store.Degraded || st.Store.Switches != 1 || st.Faults == 0 {
			t.Errorf("on_redis_error=%s: status %+v, store %+v", c.policy, st, st.Store)
		}
		if v := gauge(t, td, "ratelimitd_redis_degraded"); v != 1 {
			t.Errorf("on_redis_error=%s: ratelimitd_redis_degraded = %v, want 1", c.policy, v)
		}
		if v := gauge(t, td, "ratelimitd_redis_outages_total"); v != 1 {
			t.Errorf("on_redis_error=%s: ratelimitd_redis_outages_total = %v, want 1", c.policy, v)
		}
	}
}

// gauge returns the value of the daemon's metric name (a gauge or counter
// without labels).
func gauge(t *testing.T, td *testDaemon, name string) float64 {
	t.Helper()
	mfs, err := td.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.GetMetric()) == 0 {
			continue
		}
		m := mf.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestRedisPausedUnderLoad: two daemons share one Redis, which is
// SIGSTOPped under load. Every request is answered (on_redis_error =
// "local"); a user refused on one host during the outage is refused on
// the other host once Redis is back (SIGCONT): shared again, with the
// stricter outage state pushed.
func TestRedisPausedUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	var tds []*testDaemon
	for range 2 {
		cfg := strings.Replace(redisConfig(srv.Addr, "local"), `redis_timeout = "2s"`, `redis_timeout = "500ms"`, 1)
		tds = append(tds, startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), cfg)))
	}
	stop := make(chan struct{})
	done := make(chan int)
	for g := range 4 {
		go func() {
			n := 0
			for i := range 5000 {
				select {
				case <-stop:
					done <- n
					return
				default:
				}
				if got, err := tryPolicyQuery(tds[g%2].policyAddr, fmt.Sprintf("load%d-%d", g, i%20)); err != nil || !strings.HasPrefix(got, "action=") {
					t.Errorf("load request: %q, %v", got, err)
				}
				n++
			}
			done <- n
		}()
	}
	tds[0].message("warm", "RCPT")
	srv.Stop()
	for !tds[0].redis.Degraded() {
		tds[0].message("probe", "RCPT")
	}
	// xavier sends 21 messages through the first host during the outage.
	for i := range 21 {
		got := tds[0].message("xavier", "END-OF-MESSAGE")
		if want := i < 20; (got == "action=DUNNO") != want {
			t.Fatalf("outage: xavier's message %d: %s", i+1, got)
		}
	}
	srv.Resume()
	// Both hosts switch back (the second one, under load too, may have
	// switched to local state as well; it probes on its own), and the
	// first adds xavier's messages (its merge follows the switch).
	deadline := time.Now().Add(20 * time.Second)
	for tds[0].redis.Degraded() || tds[1].redis.Degraded() || tds[0].Status().Store.Merges < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the hosts did not switch back to Redis and merge")
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	answered := 0
	for range 4 {
		answered += <-done
	}
	if answered == 0 {
		t.Fatal("no load request answered")
	}
	// The second host knew nothing of xavier; Redis now does.
	if got := tds[1].message("xavier", "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") {
		t.Errorf("after the outage the second host answers xavier %s", got)
	}
	st := tds[0].Status()
	if st.Store == nil || st.Store.Degraded || st.Store.Switches != 1 || st.Store.Recoveries != 1 {
		t.Errorf("first host's store status after the outage: %+v", st.Store)
	}
	logs := tds[0].logs.String()
	if strings.Count(logs, `msg="redis unavailable`) != 1 || strings.Count(logs, `msg="redis available again`) != 1 {
		t.Errorf("switch and recovery not logged once each:\n%s", logs)
	}
}

// tryPolicyQuery is policyQuery (RCPT) for goroutines other than the
// test's: it returns errors instead of failing the test.
func tryPolicyQuery(addr, user string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=RCPT\nsasl_username=%s\nsender=%s@example.org\nrecipient_count=1\nclient_address=192.0.2.9\n\n", user, user)
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// TestRedisStartWithoutRedis: the daemon starts while nothing listens at
// the Redis address, answers from local state (on_redis_error = local),
// says so once in the log and in status, and shares Redis's state once
// Redis starts.
func TestRedisStartWithoutRedis(t *testing.T) {
	port := mtatest.FreePort(t)
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), redisConfig(fmt.Sprintf("127.0.0.1:%d", port), "local")))
	for i := range 21 {
		got := td.message("yolanda", "END-OF-MESSAGE")
		if want := i < 20; (got == "action=DUNNO") != want {
			t.Fatalf("without Redis, yolanda's message %d: %s", i+1, got)
		}
	}
	if st := td.Status(); st.Store == nil || !st.Store.Degraded || st.Store.Connected {
		t.Fatalf("status without Redis: %+v", st.Store)
	}
	srv := redistest.StartOn(t, port)
	deadline := time.Now().Add(5 * time.Second)
	// The daemon shares the state as soon as a probe succeeds, then adds
	// the outage's counts (the merge): wait for both.
	for td.redis.Degraded() || td.Status().Store.Merges < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not join Redis and merge: %+v", td.Status().Store)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := td.Status(); st.Store.Degraded || st.Store.LastError != "" || st.Store.Recoveries != 1 || st.Store.Merges != 1 {
		t.Errorf("status once Redis runs: %+v", st.Store)
	}
	// The outage's 21 messages were added to Redis.
	if n := srv.Must("DBSIZE"); n == "0" {
		t.Errorf("Redis empty after the merge")
	}
	if got := td.message("yolanda", "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450") {
		t.Errorf("after the merge yolanda's message: %s", got)
	}
	logs := td.logs.String()
	if strings.Count(logs, `msg="redis unavailable`) != 1 || strings.Count(logs, `msg="redis available again`) != 1 {
		t.Errorf("start and join not logged once each:\n%s", logs)
	}
}

// TestRedisKnownRecordsSetting: [store] redis_known_records reaches the
// store. With the default, a sender's messages after the first are
// decided by the fast path (ratelimitd_redis_fast_path_total, confirmed);
// with -1 none is, and every one is still decided in Redis.
func TestRedisKnownRecordsSetting(t *testing.T) {
	srv := redistest.Start(t)
	for _, c := range []struct {
		setting string
		want    float64
	}{{"", 4}, {"redis_known_records = -1\n", 0}} {
		dir := t.TempDir()
		cfg := strings.Replace(redisConfig(srv.Addr, "local"), "key_prefix = \"it:\"\n",
			"key_prefix = \"known"+fmt.Sprint(c.want)+":\"\n"+c.setting, 1)
		td := startTestDaemon(t, testConfig(t, dir, loopback(t), cfg))
		for range 5 {
			if got := td.message("wanda", "RCPT"); got != "action=DUNNO" {
				t.Fatalf("%q: %s", c.setting, got)
			}
		}
		// The first value of the family is result="confirmed".
		if v := gauge(t, td, "ratelimitd_redis_fast_path_total"); v != c.want {
			t.Errorf("%q: fast path confirmed %v of 5 messages, want %v", c.setting, v, c.want)
		}
		if st := td.Status(); st.Store == nil || st.Store.Degraded {
			t.Errorf("%q: store status %+v", c.setting, st.Store)
		}
	}
}

// TestRedisTwoDaemons: two daemons share one Redis.
// One user's 60 messages alternate between them and exactly the limit (20)
// is admitted; `rate reset` on one host lets the user through on the
// other at once; `rate show` and `status` on either report the shared
// state.
func TestRedisTwoDaemons(t *testing.T) {
	srv := redistest.Start(t)
	var tds []*testDaemon
	for range 2 {
		tds = append(tds, startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), redisConfig(srv.Addr, "local"))))
	}
	admitted := 0
	for i := range 60 {
		got := tds[i%2].message("walter", "END-OF-MESSAGE")
		switch {
		case got == "action=DUNNO":
			admitted++
		case !strings.HasPrefix(got, "action=450 4.7.1"):
			t.Fatalf("message %d: %s", i+1, got)
		}
	}
	if admitted != 20 {
		t.Fatalf("60 messages alternating between two hosts: %d admitted, want 20", admitted)
	}
	if out := tds[1].rateShow("walter"); !strings.Contains(out, "hourly") {
		t.Fatalf("rate show on the second host:\n%s", out)
	}
	if out := tds[1].statusText(); !strings.Contains(out, "store: redis, shared") {
		t.Fatalf("status on the second host:\n%s", out)
	}
	if res, err := tds[0].admin().Reset(t.Context(), "walter", ""); err != nil || res.Removed == 0 {
		t.Fatalf("rate reset on the first host: %v %+v", err, res)
	}
	if got := tds[1].message("walter", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Fatalf("after a reset on the first host the second answers %s", got)
	}
	// The offline rate commands (no daemon behind the config's admin
	// socket) read Redis directly.
	off := openRates(t, testConfig(t, t.TempDir(), loopback(t), redisConfig(srv.Addr, "local")))
	defer off.Close()
	if kr, err := off.Rates(t.Context(), 20, false); err != nil || !slices.ContainsFunc(kr, func(r policy.KeyRate) bool { return r.Key == "walter" }) {
		t.Fatalf("offline rate list: %v %+v", err, kr)
	}
}

// TestRedisOutcomesShared: an unknown recipient reported to one host
// counts on the other. Two daemons share one Redis with an unknown_rcpt
// limit of 3 per hour; olga's message is submitted through the first,
// which receives three Exim delivery events of unknown recipients for it;
// the second host then refuses olga's next message with the outcome
// limit, its `rate show` lists the failures and its events the refusal.
// Repeated for three users.
func TestRedisOutcomesShared(t *testing.T) {
	srv := redistest.Start(t)
	const outcomeLimit = "\n[[limit]]\nname = \"unknown\"\nkey = [\"sasl_username\"]\nper = \"unknown_rcpt\"\nlimit = 3\n" +
		"period = \"1h\"\nmode = \"strict\"\naction = \"defer\"\n"
	var tds []*testDaemon
	exim := loopback(t)
	for i := range 2 {
		feed := fmt.Sprintf("\n[outcome]\nexim_listen = %q\n", exim)
		if i == 1 {
			feed = fmt.Sprintf("\n[outcome]\nexim_listen = %q\n", loopback(t))
		}
		tds = append(tds, startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), redisConfig(srv.Addr, "local")+outcomeLimit+feed)))
	}
	for round, user := range []string{"olga", "oscar", "otto"} {
		qid := fmt.Sprintf("1wXyZ%d-000Abc-Q1", round)
		eom := func(td *testDaemon) string {
			return td.ask("protocol_state=END-OF-MESSAGE", "sasl_username="+user, "sender="+user+"@example.org",
				"recipient_count=3", "client_address=192.0.2.9", "queue_id="+qid)
		}
		if got := eom(tds[0]); got != "action=DUNNO" {
			t.Fatalf("%s's message on the first host: %s", user, got)
		}
		for i := range 3 {
			c, err := net.DialTimeout("tcp", exim, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "request=exim_outcome\nevent=msg:fail:delivery\nqueue_id=%s\nrecipient=nobody%d@example.net\n"+
				"data=SMTP error from remote mail server after RCPT TO:<nobody%d@example.net>: 550 5.1.1 User unknown\n\n", qid, i, i)
			reply, err := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if err != nil || reply != "action=DUNNO\n" {
				t.Fatalf("exim event %d: %q %v", i, reply, err)
			}
		}
		if out := tds[1].rateShow(user); !regexp.MustCompile(`(?m)^` + user + `\s+unknown\s+3(\.0)? .*; counts unknown recipients \(unknown_rcpt\)$`).MatchString(out) {
			t.Fatalf("rate show %s on the second host:\n%s", user, out)
		}
		if got := tds[1].message(user, "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450 4.7.1") ||
			!strings.Contains(got, "recipients failed") {
			t.Fatalf("%s's next message on the second host after 3 unknown recipients on the first: %s", user, got)
		}
	}
	// The refusals are events of the second host, naming the outcome limit.
	evs := tds[1].eventList(events.Query{})
	var got []string
	for _, e := range evs {
		got = append(got, e.Key+" "+e.Limit+" "+e.Action)
	}
	if slices.Sort(got); strings.Join(got, ", ") != "olga unknown defer, oscar unknown defer, otto unknown defer" {
		t.Fatalf("events of the second host: %v", got)
	}
}
