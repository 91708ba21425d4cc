//go:build integration

package daemontest

import (
	"bufio"
	"cmp"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The limit of daemonStack's strict hourly limit, and the daemons'
// redis_timeout.
const (
	hourlyLimit  = 20
	redisTimeout = 200 * time.Millisecond
)

// load is a running policy-delegation load on the daemons: users send
// messages (one RCPT request each, its own instance) in rounds, round r
// of user u through daemon (u+r) % len(daemons), over one persistent
// connection per goroutine and daemon, as Postfix's smtpd keeps them.
type load struct {
	daemons   []*daemon
	users     int
	name      string // users are name0@example.org ... ("user" unless set)
	random    bool   // each message through a daemon picked at random
	maxRounds int64
	admitted  []atomic.Int32
	next      atomic.Int64 // the next message: user next%users, round next/users
	sent      atomic.Int64
	failed    atomic.Int64
	late      atomic.Int64 // answered later than the budget
	slowest   atomic.Int64 // nanoseconds
	firstErr  atomic.Pointer[string]
	lateMu    sync.Mutex
	lateSeen  []string // the first late requests: when sent, how long, where
	stop      chan struct{}
	wg        sync.WaitGroup
	started   time.Time
}

// latencyBudget is how late a request may be answered: redis_timeout +
// 100 ms, as the issue asks. The daemons run without the race detector,
// and `make test` runs this package without it too (after the other
// packages, alone). Run under -race, this client's own side of each
// request is slowed several times on 2 shared cores: there the budget is
// redis_timeout + 300 ms, as in ratestore/redisstore/outage_test.go; a
// request the daemon let wait on Redis past redis_timeout still fails it.
func latencyBudget() time.Duration {
	if raceEnabled {
		return redisTimeout + 300*time.Millisecond
	}
	return redisTimeout + 100*time.Millisecond
}

// startLoadOf starts l (daemons, users, maxRounds and optionally name and
// random set) with g goroutines.
func startLoadOf(t *testing.T, l *load, g int) *load {
	t.Helper()
	l.admitted, l.stop, l.started = make([]atomic.Int32, l.users), make(chan struct{}), time.Now()
	for range g {
		l.wg.Add(1)
		go l.run()
	}
	t.Cleanup(l.end)
	return l
}

// userName is user u of a load named name ("user" if empty).
func userName(name string, u int) string {
	return fmt.Sprintf("%s%d@example.org", cmp.Or(name, "user"), u)
}

// policyConn is one persistent policy-delegation connection.
type policyConn struct {
	c net.Conn
	r *bufio.Reader
	b []byte
}

// ask sends one request (attrs are name=value lines) and returns the
// action of the answer.
func (p *policyConn) ask(attrs string) (string, error) {
	p.c.SetDeadline(time.Now().Add(5 * time.Second))
	p.b = append(p.b[:0], attrs...)
	p.b = append(p.b, '\n')
	if _, err := p.c.Write(p.b); err != nil {
		return "", err
	}
	action := ""
	for {
		line, err := p.r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			if action == "" {
				return "", fmt.Errorf("answer without action")
			}
			return action, nil
		}
		if v, ok := strings.CutPrefix(line, "action="); ok {
			action = v
		}
	}
}

func (l *load) fail(err error) {
	l.failed.Add(1)
	s := err.Error()
	l.firstErr.CompareAndSwap(nil, &s)
}

func (l *load) run() {
	defer l.wg.Done()
	conns := make([]*policyConn, len(l.daemons))
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.c.Close()
			}
		}
	}()
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		n := l.next.Add(1) - 1
		u, round := int(n%int64(l.users)), n/int64(l.users)
		if round >= l.maxRounds {
			return
		}
		h := (u + int(round)) % len(l.daemons)
		if l.random {
			h = rand.IntN(len(l.daemons))
		}
		if conns[h] == nil {
			c, err := net.DialTimeout("tcp", l.daemons[h].PolicyAddr, 5*time.Second)
			if err != nil {
				l.fail(err)
				continue
			}
			conns[h] = &policyConn{c: c, r: bufio.NewReader(c)}
		}
		user := userName(l.name, u)
		req := fmt.Sprintf("request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\ninstance=%x.%x\n"+
			"client_address=192.0.2.9\nclient_name=client.example.org\nhelo_name=client.example.org\n"+
			"sasl_method=plain\nsasl_username=%s\nsender=%s\nrecipient=rcpt@example.net\nrecipient_count=0\n",
			n, l.started.UnixNano(), user, user)
		start := time.Now()
		action, err := conns[h].ask(req)
		took := time.Since(start)
		l.sent.Add(1)
		for {
			s := l.slowest.Load()
			if int64(took) <= s || l.slowest.CompareAndSwap(s, int64(took)) {
				break
			}
		}
		if took > latencyBudget() {
			l.late.Add(1)
			l.lateMu.Lock()
			if len(l.lateSeen) < 10 {
				l.lateSeen = append(l.lateSeen, fmt.Sprintf("sent at %v, answered after %v, via %s",
					start.Sub(l.started).Round(time.Millisecond), took.Round(time.Millisecond), l.daemons[h].PolicyAddr))
			}
			l.lateMu.Unlock()
		}
		switch {
		case err != nil:
			l.fail(fmt.Errorf("%s via %s: %w", user, l.daemons[h].PolicyAddr, err))
			conns[h].c.Close()
			conns[h] = nil
		case strings.EqualFold(action, "DUNNO"):
			l.admitted[u].Add(1)
		case strings.HasPrefix(action, "450 ") || strings.HasPrefix(action, "DEFER"):
		default:
			l.fail(fmt.Errorf("%s via %s: unexpected action %q", user, l.daemons[h].PolicyAddr, action))
		}
	}
}

// rounds is the number of rounds every user has started.
func (l *load) rounds() int64 { return l.next.Load() / int64(l.users) }

// waitRounds waits until every user sent n more messages (failing the
// test after a minute).
func (l *load) waitRounds(t *testing.T, n int64) {
	t.Helper()
	target := l.rounds() + n
	waitUntil(t, time.Minute, fmt.Sprintf("%d rounds of load", n), func() bool { return l.rounds() >= target })
}

// waitTotal waits until every user sent n messages in all.
func (l *load) waitTotal(t *testing.T, n int64) {
	t.Helper()
	waitUntil(t, time.Minute, fmt.Sprintf("%d rounds of load in all", n), func() bool { return l.rounds() >= n })
}

// end stops the load and waits for its goroutines; calling it again is
// harmless.
func (l *load) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// admittedStats stops the load and returns the most and the mean
// messages admitted per user.
func (l *load) admittedStats() (most int, mean float64) {
	l.end()
	sum := 0
	for i := range l.admitted {
		a := int(l.admitted[i].Load())
		sum += a
		most = max(most, a)
	}
	return most, float64(sum) / float64(l.users)
}

// checkAnswers asserts that every request was answered, within
// latencyBudget, and logs the figures.
func (l *load) checkAnswers(t *testing.T) {
	t.Helper()
	l.end()
	slowest := time.Duration(l.slowest.Load())
	el := time.Since(l.started)
	t.Logf("%d users, %d requests in %v (%.0f/s), %d unanswered, %d later than %v, slowest %v",
		l.users, l.sent.Load(), el.Round(time.Millisecond), float64(l.sent.Load())/el.Seconds(), l.failed.Load(),
		l.late.Load(), latencyBudget(), slowest.Round(time.Millisecond))
	if n := l.failed.Load(); n != 0 {
		t.Errorf("%d requests unanswered or misanswered, the first: %s", n, *l.firstErr.Load())
	}
	if n := l.late.Load(); n != 0 {
		for _, s := range l.lateSeen {
			t.Logf("late: %s", s)
		}
		t.Errorf("%d requests answered later than redis_timeout + %v, the slowest after %v",
			n, latencyBudget()-redisTimeout, slowest.Round(time.Millisecond))
	}
}

// waitUntil polls cond every 10ms until it holds, or fails the test
// after limit.
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sharedAgain waits until no daemon is degraded (per its admin status)
// and returns how long it took from since.
func sharedAgain(t *testing.T, daemons []*daemon, since time.Time) time.Duration {
	t.Helper()
	waitUntil(t, 30*time.Second, "every daemon shared again", func() bool {
		for _, d := range daemons {
			st, err := d.status()
			if err != nil || st.Store == nil || st.Store.Degraded {
				return false
			}
		}
		return true
	})
	return time.Since(since)
}

// degraded waits until every daemon is degraded.
func degraded(t *testing.T, daemons []*daemon) {
	t.Helper()
	waitUntil(t, 30*time.Second, "every daemon degraded", func() bool {
		for _, d := range daemons {
			st, err := d.status()
			if err != nil || st.Store == nil || !st.Store.Degraded {
				return false
			}
		}
		return true
	})
}
