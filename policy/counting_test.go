package policy_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// msg plays one message of a Postfix session through e: a RCPT request per
// recipient (when rcptHook), then END-OF-MESSAGE (when eomHook) unless
// every RCPT was refused. It returns the RCPT decisions and the
// END-OF-MESSAGE one.
type msg struct {
	user, inst string
	rcpts      int
	declared   int64 // SIZE= at MAIL FROM, sent at RCPT
	size       int64 // real size, sent at END-OF-MESSAGE
	stage      string
}

func (m msg) req(state string) *policy.Request {
	return &policy.Request{ProtocolState: state, SASLUsername: m.user, Sender: m.user + "@example.org",
		ClientAddress: "192.0.2.7", Instance: m.inst, Stage: m.stage}
}

func (m msg) rcpt(e *policy.Engine, now time.Time, i int) policy.Decision {
	r := m.req(policy.StateRcpt)
	r.Recipient = fmt.Sprintf("r%d@example.net", i)
	r.Size = m.declared
	return e.Evaluate(context.Background(), now, r)
}

func (m msg) eom(e *policy.Engine, now time.Time, accepted int) policy.Decision {
	r := m.req(policy.StateEndOfMessage)
	r.RecipientCount, r.Size = accepted, m.size
	return e.Evaluate(context.Background(), now, r)
}

func (m msg) send(e *policy.Engine, now time.Time, rcptHook, eomHook bool) (rcpts []policy.Decision, end policy.Decision) {
	accepted := m.rcpts
	if rcptHook {
		accepted = 0
		for i := range m.rcpts {
			d := m.rcpt(e, now, i)
			rcpts = append(rcpts, d)
			if d.Action.Admits() || d.Action == policy.Hold || d.Action == policy.Freeze {
				accepted++
			}
		}
	}
	if eomHook && accepted > 0 {
		end = m.eom(e, now, accepted)
	}
	return rcpts, end
}

func rateOf(t *testing.T, e *policy.Engine, now time.Time, key, limit string) float64 {
	t.Helper()
	kr, err := e.Lookup(context.Background(), now, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kr {
		if k.Limit == limit {
			return k.Rate
		}
	}
	return 0
}

// near compares rates: requests at one instant are still 1e-10 periods
// apart (the minimum interval of Exim's formula), so n of them decay by a
// relative n*1e-10/2 at most.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-4*math.Max(b, 1) }

var layouts = []struct {
	name             string
	rcptHook, eomHok bool
}{{"RCPT only", true, false}, {"RCPT and END-OF-MESSAGE", true, true}, {"END-OF-MESSAGE only", false, true}}

// Required behaviour 1 and 3: the default stack (200/h leaky + 1000/day
// strict), whichever hooks: the 201st message of a burst is refused, a
// message with five recipients counts once, nothing is counted twice.
func TestCountingEachMessageOnce(t *testing.T) {
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			e := newEngine(t, hourlyDaily())
			for i := 1; i <= 205; i++ {
				m := msg{user: "alice", inst: fmt.Sprintf("a%d", i), rcpts: 1, size: 1000}
				rc, end := m.send(e, t0, lay.rcptHook, lay.eomHok)
				final := end.Action
				if lay.rcptHook {
					final = rc[0].Action
				}
				if want := policy.Pass; i > 200 {
					if final != policy.Defer {
						t.Fatalf("message %d: %v, want defer", i, final)
					}
				} else if final != want {
					t.Fatalf("message %d: %v", i, final)
				}
			}
			if r := rateOf(t, e, t0, "alice", "hourly"); !near(r, 200) {
				t.Fatalf("hourly rate %v, want 200 (leaky counts the admitted)", r)
			}
			if r := rateOf(t, e, t0, "alice", "daily"); !near(r, 205) {
				t.Fatalf("daily rate %v, want 205 (strict counts every attempt once)", r)
			}
			for i := 1; i <= 60; i++ {
				m := msg{user: "bob", inst: fmt.Sprintf("b%d", i), rcpts: 5, size: 1000}
				rc, end := m.send(e, t0, lay.rcptHook, lay.eomHok)
				for j, d := range rc {
					if d.Action != policy.Pass {
						t.Fatalf("bob message %d RCPT %d: %v", i, j+1, d.Action)
					}
				}
				if end.Action != policy.Pass {
					t.Fatalf("bob message %d end: %v", i, end.Action)
				}
			}
			if r := rateOf(t, e, t0, "bob", "hourly"); !near(r, 60) {
				t.Fatalf("bob: hourly rate %v after 60 messages of 5 recipients, want 60", r)
			}
		})
	}
}

// Required behaviour 2: every RCPT of a refused message gets the same answer
// and is not counted again; a message admitted at its first RCPT is not
// refused at a later one by a per_mail limit.
func TestCountingSameAnswerForEveryRcpt(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "mails", Key: []string{"sasl_username"}, Limit: 2, Period: policy.Duration(time.Hour), Mode: "strict"},
	}}
	e := newEngine(t, c)
	m1 := msg{user: "carl", inst: "m1", rcpts: 1}
	m2 := msg{user: "carl", inst: "m2", rcpts: 5}
	m3 := msg{user: "carl", inst: "m3", rcpts: 4}
	if d := m1.rcpt(e, t0, 0); d.Action != policy.Pass {
		t.Fatal(d.Reason)
	}
	if d := m2.rcpt(e, t0, 0); d.Action != policy.Pass {
		t.Fatal(d.Reason)
	}
	// m3 is the third message: refused at every RCPT, with one text.
	var text string
	for i := range 4 {
		d := m3.rcpt(e, t0, i)
		if d.Action != policy.Defer || d.Repeated != (i > 0) {
			t.Fatalf("m3 RCPT %d: %+v", i+1, d)
		}
		if i == 0 {
			text = d.Text
		} else if d.Text != text {
			t.Fatalf("m3 RCPT %d says %q, RCPT 1 said %q", i+1, d.Text, text)
		}
		// m2's later RCPTs, interleaved, stay admitted.
		if d := m2.rcpt(e, t0, i+1); d.Action != policy.Pass {
			t.Fatalf("m2 RCPT %d refused after m2 was admitted: %+v", i+2, d)
		}
	}
	if r := rateOf(t, e, t0, "carl", "mails"); !near(r, 3) {
		t.Fatalf("strict rate %v, want 3 (m3 counted once for its four RCPTs)", r)
	}
}

// Required behaviour 3: per_byte is charged the declared size at RCPT and
// topped up to the real size at END-OF-MESSAGE; a message refused at RCPT is
// not counted again at END-OF-MESSAGE.
func TestCountingBytesToppedUp(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "bytes", Key: []string{"sasl_username"}, Limit: 100000, Period: policy.Duration(time.Hour), Per: "byte", Mode: "strict"},
		{Name: "mails", Key: []string{"sasl_username"}, Limit: 3, Period: policy.Duration(time.Hour), Mode: "strict"},
	}}
	e := newEngine(t, c)
	m := msg{user: "dora", inst: "d1", rcpts: 3, declared: 3000, size: 5000}
	m.send(e, t0, true, true)
	if r := rateOf(t, e, t0, "dora", "bytes"); !near(r, 5000) {
		t.Fatalf("bytes %v, want 5000 (3000 declared + 2000 at END-OF-MESSAGE)", r)
	}
	m = msg{user: "dora", inst: "d2", rcpts: 2, size: 7000} // no SIZE=
	m.send(e, t0, true, true)
	if r := rateOf(t, e, t0, "dora", "bytes"); !near(r, 12000) {
		t.Fatalf("bytes %v, want 12000", r)
	}
	if r := rateOf(t, e, t0, "dora", "mails"); !near(r, 2) {
		t.Fatalf("mails %v, want 2", r)
	}
	msg{user: "dora", inst: "d3", rcpts: 1}.send(e, t0, true, true)
	m = msg{user: "dora", inst: "d4", rcpts: 1, size: 100}
	if d := m.rcpt(e, t0, 0); d.Action != policy.Defer {
		t.Fatalf("fourth message at RCPT: %v", d.Action)
	}
	// An END-OF-MESSAGE for the refused message (not sent by Postfix, but
	// by a confused client of the protocol) repeats the verdict and
	// charges no mail.
	if d := m.eom(e, t0, 1); d.Action != policy.Defer || !d.Repeated {
		t.Fatalf("END-OF-MESSAGE of a refused message: %+v", d)
	}
	if r := rateOf(t, e, t0, "dora", "mails"); !near(r, 4) {
		t.Fatalf("mails %v, want 4", r)
	}
}

// Required behaviour 4: strict counts every attempt (a re-sent deferred
// message is a new transaction), leaky only what it admits, forgiving
// counts attempts but clamps the stored rate to the limit.
func TestCountingModesCountAttempts(t *testing.T) {
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			c := policy.Config{Limits: []policy.LimitConfig{
				{Name: "strict", Key: []string{"sasl_username"}, Limit: 3, Period: policy.Duration(time.Hour), Mode: "strict"},
				{Name: "leaky", Key: []string{"sender"}, Limit: 100, Period: policy.Duration(time.Hour), Mode: "leaky"},
				{Name: "forgiving", Key: []string{"client_address"}, Limit: 100, Period: policy.Duration(time.Hour), Mode: "forgiving", Action: "warn"},
			}}
			e := newEngine(t, c)
			for i := 1; i <= 8; i++ {
				m := msg{user: "eve", inst: fmt.Sprintf("e%d", i), rcpts: 2}
				rc, end := m.send(e, t0, lay.rcptHook, lay.eomHok)
				final := end.Action
				if lay.rcptHook {
					final = rc[0].Action
				}
				if (i > 3) != (final == policy.Defer) {
					t.Fatalf("attempt %d: %v", i, final)
				}
			}
			if r := rateOf(t, e, t0, "eve", "strict"); !near(r, 8) {
				t.Fatalf("strict %v, want 8: each re-sent message counts", r)
			}
			if r := rateOf(t, e, t0, "eve@example.org", "leaky"); !near(r, 3) {
				t.Fatalf("leaky %v, want 3: refused attempts do not count", r)
			}
		})
	}
	// Forgiving: counted while refused, but the stored rate is clamped.
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "f", Key: []string{"sasl_username"}, Limit: 3, Period: policy.Duration(time.Hour), Mode: "forgiving"},
	}}
	e := newEngine(t, c)
	for i := 1; i <= 8; i++ {
		msg{user: "fay", inst: fmt.Sprintf("f%d", i), rcpts: 1}.send(e, t0, true, true)
	}
	if r := rateOf(t, e, t0, "fay", "f"); !near(r, 3) {
		t.Fatalf("forgiving %v, want clamped to 3", r)
	}
}

// Required behaviour 5: per_rcpt counts each accepted recipient once,
// whichever hooks (no double count with recipient_count).
func TestCountingRecipientsOnce(t *testing.T) {
	for _, lay := range layouts {
		t.Run(lay.name, func(t *testing.T) {
			c := policy.Config{Limits: []policy.LimitConfig{
				{Name: "rcpts", Key: []string{"sasl_username"}, Limit: 12, Period: policy.Duration(time.Hour), Per: "rcpt"},
			}}
			e := newEngine(t, c)
			msg{user: "gil", inst: "g1", rcpts: 5}.send(e, t0, lay.rcptHook, lay.eomHok)
			msg{user: "gil", inst: "g2", rcpts: 5}.send(e, t0, lay.rcptHook, lay.eomHok)
			if r := rateOf(t, e, t0, "gil", "rcpts"); !near(r, 10) {
				t.Fatalf("rcpts %v after 2 messages of 5, want 10", r)
			}
			if !lay.rcptHook {
				return
			}
			// A third message of 5: RCPTs 3-5 are over (13 > 12) and
			// refused one by one; END-OF-MESSAGE says 2 accepted and
			// charges nothing more.
			m := msg{user: "gil", inst: "g3", rcpts: 5}
			rc, _ := m.send(e, t0, true, lay.eomHok)
			for i, d := range rc {
				if (i >= 2) != (d.Action == policy.Defer) {
					t.Fatalf("g3 RCPT %d: %v", i+1, d.Action)
				}
			}
			if r := rateOf(t, e, t0, "gil", "rcpts"); !near(r, 12) {
				t.Fatalf("rcpts %v, want 12", r)
			}
		})
	}
}

// Required behaviour 6: a hold verdict reaches Postfix at RCPT (HOLD is a
// valid action there) and every RCPT of the message repeats it.
func TestCountingHoldAtRcpt(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hold", Key: []string{"sasl_username"}, Limit: 1, Period: policy.Duration(time.Hour), Mode: "strict", Action: "hold"},
	}}
	e := newEngine(t, c)
	msg{user: "hal", inst: "h1", rcpts: 1}.send(e, t0, true, false)
	rc, _ := msg{user: "hal", inst: "h2", rcpts: 3}.send(e, t0, true, false)
	for i, d := range rc {
		if d.Action != policy.Hold || d.Repeated != (i > 0) {
			t.Fatalf("RCPT %d: %+v", i+1, d)
		}
	}
	if r := rateOf(t, e, t0, "hal", "hold"); !near(r, 2) {
		t.Fatalf("rate %v, want 2", r)
	}
}

// Required behaviour 7: the daemon learns the stages it is asked at and says
// in plain words when a limit cannot count as hooked.
func TestCountingLearnsStagesAndAdvises(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "bytes", Key: []string{"sasl_username"}, Limit: 1 << 20, Period: policy.Duration(time.Hour), Per: "byte"},
	}}
	adv := strings.Join(policy.ConfigAdvice(c), "\n")
	if !strings.Contains(adv, "smtpd_end_of_data_restrictions") {
		t.Fatalf("config advice:\n%s", adv)
	}
	e := newEngine(t, c)
	if a := e.Advice(); len(a) != 0 {
		t.Fatalf("advice before any request: %v", a)
	}
	msg{user: "ida", inst: "i1", rcpts: 2}.send(e, t0, true, false)
	a := strings.Join(e.Advice(), "\n")
	if !strings.Contains(a, "limit bytes counts bytes") || !strings.Contains(a, "smtpd_end_of_data_restrictions = check_policy_service") {
		t.Fatalf("advice with RCPT only: %q", a)
	}
	st := e.Stages()
	if len(st) != 1 || st[0].State != policy.StateRcpt || st[0].Requests != 2 || st[0].Via != policy.ViaPolicy {
		t.Fatalf("stages %+v", st)
	}
	msg{user: "ida", inst: "i2", rcpts: 1, size: 10}.send(e, t0, true, true)
	if a := e.Advice(); len(a) != 0 {
		t.Fatalf("advice once END-OF-MESSAGE is asked: %v", a)
	}
}

// The milter and policy delegation asking about the same Postfix message
// charge it once; each front end keeps its own limits' verdict.
func TestCountingPolicyAndMilterJoined(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "both", Key: []string{"sasl_username"}, Limit: 100, Period: policy.Duration(time.Hour)},
		{Name: "freeze", Key: []string{"sasl_username"}, Limit: 2, Period: policy.Duration(time.Hour), Mode: "strict",
			Action: "freeze", Via: []string{policy.ViaMilter}},
	}}
	e := newEngine(t, c)
	for i := 1; i <= 4; i++ {
		p := msg{user: "jan", inst: fmt.Sprintf("pf%d", i), rcpts: 2, size: 500, stage: policy.ViaPolicy}
		m := msg{user: "jan", inst: fmt.Sprintf("milter%d", i), rcpts: 2, size: 500, stage: policy.ViaMilter}
		// Postfix's order: policy RCPT then milter RCPT, per recipient;
		// then the end of data.
		var last policy.Decision
		for r := range 2 {
			if d := p.rcpt(e, t0, r); d.Action != policy.Pass {
				t.Fatalf("message %d policy RCPT: %+v", i, d)
			}
			last = m.rcpt(e, t0, r)
		}
		if d := p.eom(e, t0, 2); d.Action != policy.Pass {
			t.Fatalf("message %d policy END-OF-MESSAGE: %v (the milter's freeze leaked)", i, d.Action)
		}
		end := m.eom(e, t0, 2)
		if want := (i > 2); (last.Action == policy.Freeze) != want || (end.Action == policy.Freeze) != want {
			t.Fatalf("message %d milter: rcpt %v end %v", i, last.Action, end.Action)
		}
	}
	if r := rateOf(t, e, t0, "jan", "both"); !near(r, 4) {
		t.Fatalf("a limit of both front ends counted %v for 4 messages, want 4", r)
	}
	if r := rateOf(t, e, t0, "jan", "freeze"); !near(r, 4) {
		t.Fatalf("milter-only limit %v, want 4", r)
	}
}

// Required behaviour 8: per-message memory is bounded, whatever the number
// of messages and whether END-OF-MESSAGE ever comes.
func TestCountingMemoryBounded(t *testing.T) {
	n := 1_000_000
	if raceEnabled || testing.Short() {
		n = 200_000
	}
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "mails", Key: []string{"sasl_username"}, Limit: 1e9, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	ctx := context.Background()
	req := &policy.Request{ProtocolState: policy.StateRcpt, SASLUsername: "kim", ClientAddress: "192.0.2.7", Recipient: "x@example.net"}
	var heapAt [2]uint64
	for i := range n {
		req.Instance = fmt.Sprintf("inst-%d", i)
		e.Evaluate(ctx, t0, req)
		if i == n/4 || i == n-1 {
			runtime.GC()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			heapAt[min(i/(n/2), 1)] = ms.HeapAlloc
		}
		if f := e.InFlight(); f > 2<<15 {
			t.Fatalf("%d messages remembered after %d", f, i+1)
		}
	}
	t.Logf("%d RCPT-only messages: heap %d KiB at 1/4, %d KiB at the end, %d in flight", n,
		heapAt[0]>>10, heapAt[1]>>10, e.InFlight())
	if heapAt[1] > heapAt[0]*3/2+(8<<20) {
		t.Fatalf("heap grew from %d to %d bytes", heapAt[0], heapAt[1])
	}
	if r := rateOf(t, e, t0, "kim", "mails"); !near(r, float64(n)) {
		t.Fatalf("rate %v, want %d", r, n)
	}
	// Without an instance, each request is a message of its own.
	e2 := newEngine(t, c)
	req.Instance = ""
	for range 3 {
		e2.Evaluate(ctx, t0, req)
	}
	if r := rateOf(t, e2, t0, "kim", "mails"); !near(r, 3) {
		t.Fatalf("instance-less: %v, want 3", r)
	}
}

// A property test: many concurrent messages, their RCPT and END-OF-MESSAGE
// requests interleaved at random; every message is counted exactly once
// (strict limit: the rate is the number of messages) and answered the same
// at each of its RCPTs.
// Per-message memory stays bounded when many senders' messages wait to be
// joined by a milter that never asks: each (client, user, sender) keeps
// up to 16 such messages, but the generations bound them all (issue: the
// waiting messages were not counted against the bound and grew with the
// number of senders, 16 per sender).
func TestCountingMemoryBoundedManySenders(t *testing.T) {
	users, perUser := 6000, 17
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "mails", Key: []string{"sasl_username"}, Limit: 1e9, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	ctx := context.Background()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	start := heap()
	names := make([]string, users)
	for u := range names {
		names[u] = fmt.Sprintf("user%d", u)
	}
	req := &policy.Request{ClientAddress: "192.0.2.7", Recipient: "x@example.net", RecipientCount: 1}
	for i := range perUser {
		for u, name := range names {
			req.SASLUsername, req.Sender = name, name+"@example.org"
			req.Instance = fmt.Sprintf("%d.%d", u, i)
			req.ProtocolState = policy.StateRcpt
			e.Evaluate(ctx, t0, req)
			req.ProtocolState = policy.StateEndOfMessage
			e.Evaluate(ctx, t0, req)
		}
		if f := e.InFlight(); f > 2<<15 {
			t.Fatalf("%d messages remembered after %d", f, (i+1)*users)
		}
	}
	grown := int64(heap()) - int64(start)
	t.Logf("%d messages of %d senders: heap grew %d KiB, %d in flight", users*perUser, users, grown>>10, e.InFlight())
	if grown > 32<<20 {
		t.Fatalf("heap grew %d MiB for %d messages (bound: 2 generations of 32768)", grown>>20, users*perUser)
	}
	if r := rateOf(t, e, t0, "user1", "mails"); !near(r, float64(perUser)) {
		t.Fatalf("rate %v, want %d", r, perUser)
	}
}

func TestCountingRandomInterleavings(t *testing.T) {
	for seed := uint64(1); seed <= 5; seed++ {
		c := policy.Config{Limits: []policy.LimitConfig{
			{Name: "strict", Key: []string{"sasl_username"}, Limit: 40, Period: policy.Duration(time.Hour), Mode: "strict"},
			{Name: "leaky", Key: []string{"sender"}, Limit: 1000, Period: policy.Duration(time.Hour), Mode: "leaky"},
		}}
		e := newEngine(t, c)
		const workers, perWorker = 8, 25
		var mu sync.Mutex
		admitted := 0
		var wg sync.WaitGroup
		errs := make(chan string, workers*perWorker)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				for k := range perWorker {
					m := msg{user: "lou", inst: fmt.Sprintf("w%d-%d", w, k), rcpts: 1 + rng.IntN(6), size: int64(rng.IntN(9000))}
					eomHook := rng.IntN(2) == 0
					var first policy.Action
					accepted := 0
					for i := range m.rcpts {
						d := m.rcpt(e, t0, i)
						if i == 0 {
							first = d.Action
						} else if d.Action != first {
							errs <- fmt.Sprintf("%s RCPT %d: %v, RCPT 1 said %v", m.inst, i+1, d.Action, first)
						}
						if d.Action.Admits() {
							accepted++
						}
						if rng.IntN(3) == 0 {
							runtime.Gosched()
						}
					}
					if eomHook && accepted > 0 {
						if d := m.eom(e, t0, accepted); d.Action != policy.Pass {
							errs <- fmt.Sprintf("%s END-OF-MESSAGE after an admitted RCPT: %v", m.inst, d.Action)
						}
					}
					if first == policy.Pass {
						mu.Lock()
						admitted++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for s := range errs {
			t.Error(s)
		}
		if r := rateOf(t, e, t0, "lou", "strict"); !near(r, workers*perWorker) {
			t.Fatalf("seed %d: strict rate %v, want %d (each message once)", seed, r, workers*perWorker)
		}
		if r := rateOf(t, e, t0, "lou@example.org", "leaky"); !near(r, float64(admitted)) {
			t.Fatalf("seed %d: leaky rate %v, want %d admitted messages", seed, r, admitted)
		}
	}
}

// With policy delegation alone, messages stop waiting to be joined by a
// milter once the warm-up is over: a Postfix that asks at RCPT and
// END-OF-MESSAGE keeps almost nothing per message.
func TestCountingPolicyOnlyKeepsNoWaitingMessages(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "mails", Key: []string{"sasl_username"}, Limit: 1e9, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	for i := range 40_000 {
		msg{user: fmt.Sprintf("u%d", i%500), inst: fmt.Sprintf("p%d", i), rcpts: 1}.send(e, t0, true, true)
	}
	if n := e.InFlight(); n > 4096 {
		t.Fatalf("%d messages remembered after 40,000 finished ones, want at most the warm-up's", n)
	}
}

// A hostile client of the policy port that sends a request with the
// instance of someone else's message (Postfix instances are predictable)
// does not make that message look already counted.
func TestCountingForgedInstanceDoesNotExempt(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "mails", Key: []string{"sasl_username"}, Limit: 100, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	for i := range 5 {
		inst := fmt.Sprintf("7f3.6a1b%d.0", i)
		msg{user: "mallory", inst: inst, rcpts: 1}.rcpt(e, t0, 0) // forged first
		msg{user: "alice", inst: inst, rcpts: 2}.send(e, t0, true, true)
	}
	if r := rateOf(t, e, t0, "alice", "mails"); !near(r, 5) {
		t.Fatalf("alice's rate %v after 5 messages whose instances were used first by forged requests, want 5", r)
	}
}
