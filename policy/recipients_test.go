package policy_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

func uniqueEngine(t *testing.T, mode string, limit float64) *policy.Engine {
	t.Helper()
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{
		{Name: "uniq", Key: []string{"sasl_username"}, Per: "addr", Limit: limit, Period: policy.Duration(time.Hour),
			Mode: mode, Action: "defer"},
	}})
	e.UseRecipientSets(ratestore.NewRecipients(ratestore.RecipientOptions{}))
	return e
}

// sendTo plays one message through the RCPT and END-OF-MESSAGE hooks and
// returns how many recipients were refused and the cost charged.
func sendTo(t *testing.T, e *policy.Engine, now time.Time, user, inst string, rcpts []string) (refused int, cost float64) {
	t.Helper()
	ctx := context.Background()
	base := policy.Request{SASLUsername: user, Sender: user + "@example.org", ClientAddress: "192.0.2.7", Instance: inst}
	accepted := 0
	for _, r := range rcpts {
		req := base
		req.ProtocolState, req.Recipient = policy.StateRcpt, r
		d := e.Evaluate(ctx, now, &req)
		if d.Fault != nil {
			t.Fatal(d.Fault)
		}
		for _, m := range d.Measures {
			cost += m.Cost
		}
		if d.Action.Admits() {
			accepted++
		} else {
			refused++
		}
	}
	if accepted > 0 {
		req := base
		req.ProtocolState, req.RecipientCount = policy.StateEndOfMessage, accepted
		if len(rcpts) == 1 {
			req.Recipient = rcpts[0]
		}
		d := e.Evaluate(ctx, now, &req)
		for _, m := range d.Measures {
			cost += m.Cost
		}
	}
	return refused, cost
}

func addrs(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d@example.net", prefix, from+i)
	}
	return out
}

// A newsletter to the same 40 addresses every 15 minutes costs 40 once; a
// spam run to 10 new addresses every 5 minutes is deferred at the limit.
func TestPerAddrNewsletterVersusSpam(t *testing.T) {
	e := uniqueEngine(t, "leaky", 50)
	list := addrs("reader", 0, 40)
	var newsCost float64
	spamRefusedAt := -1
	for i := range 48 { // four hours
		now := t0.Add(time.Duration(i) * 5 * time.Minute)
		if i%3 == 0 {
			refused, cost := sendTo(t, e, now, "news", fmt.Sprintf("n%d", i), list)
			if refused > 0 {
				t.Fatalf("newsletter message %d: %d recipients refused", i/3, refused)
			}
			newsCost += cost
		}
		refused, _ := sendTo(t, e, now, "spammer", fmt.Sprintf("s%d", i), addrs("victim", 10*i, 10))
		if refused > 0 && spamRefusedAt < 0 {
			spamRefusedAt = i
		}
	}
	if newsCost < 40 || newsCost > 80 {
		t.Errorf("newsletter charged %v over four hours, want 40 (first send) plus a refresh at most", newsCost)
	}
	if spamRefusedAt < 0 || spamRefusedAt > 7 {
		t.Errorf("spam run first refused at message %d, want within 40 minutes (50 new addresses an hour)", spamRefusedAt)
	}
}

// A recipient refused by a leaky limit is not remembered: the retry is
// charged as new. A strict limit remembers it (it counted the attempt).
func TestPerAddrRefusedRecipientStaysNew(t *testing.T) {
	for _, c := range []struct {
		mode      string
		retryCost float64
	}{{"leaky", 1}, {"strict", 0}} {
		e := uniqueEngine(t, c.mode, 3)
		if refused, _ := sendTo(t, e, t0, "alice", "m1", addrs("x", 0, 4)); refused != 1 {
			t.Fatalf("%s: %d refused, want 1 (the 4th)", c.mode, refused)
		}
		// Three hours later the rate has decayed; retry the 4th alone.
		_, cost := sendTo(t, e, t0.Add(3*time.Hour/2), "alice", "m2", addrs("x", 3, 1))
		if cost != c.retryCost {
			t.Errorf("%s: retry of the refused recipient cost %v, want %v", c.mode, cost, c.retryCost)
		}
	}
}

// Asked only at END-OF-MESSAGE: the only recipient is looked up; several
// recipients are charged recipient_count.
func TestPerAddrEndOfMessageOnly(t *testing.T) {
	e := uniqueEngine(t, "leaky", 100)
	ctx := context.Background()
	costOf := func(inst string, n int, rcpt string) float64 {
		d := e.Evaluate(ctx, t0, &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "bob",
			Instance: inst, ClientAddress: "192.0.2.7", RecipientCount: n, Recipient: rcpt})
		if len(d.Measures) != 1 {
			t.Fatalf("measures %+v", d.Measures)
		}
		return d.Measures[0].Cost
	}
	if c := costOf("a", 1, "Friend@example.net"); c != 1 {
		t.Errorf("first message to a friend cost %v, want 1", c)
	}
	if c := costOf("b", 1, "friend@EXAMPLE.net"); c != 0 {
		t.Errorf("second message to the same friend cost %v, want 0", c)
	}
	if c := costOf("c", 3, ""); c != 3 {
		t.Errorf("three unnamed recipients cost %v, want 3 (upper bound)", c)
	}
}

// Without recipient sets every recipient is new; Reset forgets the set.
func TestPerAddrWithoutSetsAndReset(t *testing.T) {
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{
		{Name: "uniq", Key: []string{"sasl_username"}, Per: "addr", Limit: 100, Period: policy.Duration(time.Hour)},
	}})
	if _, cost := sendTo(t, e, t0, "carol", "m1", addrs("y", 0, 2)); cost != 2 {
		t.Errorf("without sets: cost %v", cost)
	}
	if _, cost := sendTo(t, e, t0, "carol", "m2", addrs("y", 0, 2)); cost != 2 {
		t.Errorf("without sets, same recipients: cost %v, want 2", cost)
	}
	e = uniqueEngine(t, "leaky", 100)
	sendTo(t, e, t0, "carol", "m1", addrs("y", 0, 2))
	if _, err := e.Reset(context.Background(), "carol", ""); err != nil {
		t.Fatal(err)
	}
	if _, cost := sendTo(t, e, t0, "carol", "m2", addrs("y", 0, 2)); cost != 2 {
		t.Errorf("after reset: cost %v, want 2", cost)
	}
}

// A baseline limit holds a new user to its floor, says so in its reply,
// and shows the allowance in Lookup.
func TestBaselineEngine(t *testing.T) {
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{
		{Name: "usual", Key: []string{"sasl_username"}, Algorithm: "baseline", Cap: 100, Floor: 5, Factor: 3,
			LearnPeriod: policy.Duration(14 * 24 * time.Hour), Period: policy.Duration(time.Hour)},
	}})
	ctx := context.Background()
	for i := 1; i <= 6; i++ {
		d := e.Evaluate(ctx, t0, eom("dave"))
		if i <= 5 && d.Action != policy.Pass {
			t.Fatalf("message %d refused: %s", i, d.Reason)
		}
		if i == 6 {
			if d.Action != policy.Defer || d.Max != 5 || !strings.Contains(d.Text, "limit 5") {
				t.Fatalf("6th: %v max %v text %q", d.Action, d.Max, d.Text)
			}
		}
	}
	kr, err := e.Lookup(ctx, t0, "dave")
	if err != nil || len(kr) != 1 || !kr[0].Baseline || kr[0].Max != 5 || kr[0].Cap != 100 {
		t.Fatalf("lookup %+v %v", kr, err)
	}
	li := e.Limits()[0]
	if li.Limit != 100 || li.Floor != 5 || li.Factor != 3 || li.LearnPeriod != 14*24*time.Hour {
		t.Errorf("limit info %+v", li)
	}
}

func TestBaselineConfigErrors(t *testing.T) {
	for _, c := range []struct {
		lc   policy.LimitConfig
		want string
	}{
		{policy.LimitConfig{Limit: 10, Factor: 2}, "need algorithm"},
		{policy.LimitConfig{Algorithm: "baseline", Limit: 10, Cap: 20, Floor: 1}, "differ"},
		{policy.LimitConfig{Algorithm: "baseline", Cap: 20}, "floor"},
		{policy.LimitConfig{Per: "addrs", Limit: 1}, "addr"},
	} {
		c.lc.Name, c.lc.Key, c.lc.Period = "x", []string{"sasl_username"}, policy.Duration(time.Hour)
		err := policy.Check(policy.Config{Limits: []policy.LimitConfig{c.lc}})
		if !errors.Is(err, policy.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.lc, err, c.want)
		}
	}
}
