package policy_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// ladderLimit is one limit over sasl_username, per mail, per hour.
func ladderLimit(name, action, mode string, max float64) policy.LimitConfig {
	return policy.LimitConfig{Name: name, Key: []string{"sasl_username"}, Limit: max,
		Period: policy.Duration(time.Hour), Mode: mode, Action: action}
}

// answers plays n one-recipient messages of user through e at one instant,
// each as Postfix asks at RCPT and END-OF-MESSAGE, and returns the answer
// to each (the RCPT one; END-OF-MESSAGE must repeat it when asked).
func answers(t *testing.T, e *policy.Engine, user string, n int) []policy.Action {
	t.Helper()
	var got []policy.Action
	for i := range n {
		rc, end := msg{user: user, inst: fmt.Sprintf("%s-%d", user, i), rcpts: 1, stage: policy.ViaPolicy}.send(e, t0, true, true)
		a := rc[0].Action
		if !a.Refuses() && end.Action != a {
			t.Fatalf("%s message %d: RCPT %v, END-OF-MESSAGE %v", user, i+1, a, end.Action)
		}
		got = append(got, a)
	}
	return got
}

// want is the expected answers: actions[k] for messages from[k] to
// from[k+1]-1 (1-based), the last to the end.
func want(n int, from []int, actions []policy.Action) []policy.Action {
	w := make([]policy.Action, n)
	for k, f := range from {
		for i := f - 1; i < n; i++ {
			w[i] = actions[k]
		}
	}
	return w
}

func checkLadder(t *testing.T, name string, got, want []policy.Action) {
	t.Helper()
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: message %d answered %v, want %v (all: %v)", name, i+1, got[i], want[i], got)
		}
	}
}

// TestLadderAnswers: ladders of one user's limits, each played by several
// senders in turn so one's state cannot make another's answer:
//   - [hold 8/h strict, defer 5/h leaky]: DUNNO 1–5, DEFER 6–8 (the hold
//     limit counts the deferred attempts), HOLD from 9 (it is first);
//   - [defer 5/h leaky, hold 8/h strict]: DUNNO 1–5, DEFER from 6;
//   - [freeze 8/h strict, defer 5/h leaky]: DUNNO 1–5, DEFER 6–8, freeze
//     from 9;
//   - [defer 5/h leaky, hold 3/h strict]: held messages 4–5 are admitted
//     and counted by the leaky defer, which answers from 6 (not everything
//     above 3 held for ever).
//
// rates are the leaky hourly limit's rate after 14 messages: the messages
// held while it was over are not counted, as attempts it refuses.
func TestLadderAnswers(t *testing.T) {
	P, D, H, F := policy.Pass, policy.Defer, policy.Hold, policy.Freeze
	for _, tc := range []struct {
		name    string
		limits  []policy.LimitConfig
		from    []int
		actions []policy.Action
		hourly  float64
	}{
		{"hold above defer", []policy.LimitConfig{ladderLimit("hold", "hold", "strict", 8), ladderLimit("hourly", "defer", "leaky", 5)},
			[]int{1, 6, 9}, []policy.Action{P, D, H}, 5},
		{"defer before hold", []policy.LimitConfig{ladderLimit("hourly", "defer", "leaky", 5), ladderLimit("hold", "hold", "strict", 8)},
			[]int{1, 6}, []policy.Action{P, D}, 5},
		{"freeze above defer", []policy.LimitConfig{ladderLimit("freeze", "freeze", "strict", 8), ladderLimit("hourly", "defer", "leaky", 5)},
			[]int{1, 6, 9}, []policy.Action{P, D, F}, 5},
		{"hold below defer", []policy.LimitConfig{ladderLimit("hourly", "defer", "leaky", 5), ladderLimit("hold", "hold", "strict", 3)},
			[]int{1, 4, 6}, []policy.Action{P, H, D}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, policy.Config{Limits: tc.limits})
			for _, user := range []string{"dave", "erin", "fred"} {
				checkLadder(t, user, answers(t, e, user, 14), want(14, tc.from, tc.actions))
				if r := rateOf(t, e, t0, user, "hourly"); !near(r, tc.hourly) {
					t.Fatalf("%s: leaky hourly rate %v, want %v", user, r, tc.hourly)
				}
				if r := rateOf(t, e, t0, user, tc.limits[0].Name); tc.limits[0].Mode == "strict" && !near(r, 14) {
					t.Fatalf("%s: strict %s rate %v, want 14", user, tc.limits[0].Name, r)
				}
			}
		})
	}
}

// TestFirstRefusingLimitAnswers: a warning does not stop the ladder, and a
// later stricter action does not overrule an earlier limit that answers.
func TestFirstRefusingLimitAnswers(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "warn", Key: []string{"sender"}, Limit: 1, Period: policy.Duration(time.Hour), Action: "warn"},
		{Name: "hold", Key: []string{"sender"}, Limit: 2, Period: policy.Duration(time.Hour), Action: "hold", Mode: "strict"},
		{Name: "reject", Key: []string{"sender_domain"}, Limit: 3, Period: policy.Duration(time.Hour), Action: "reject", Mode: "strict"},
	}}
	e := newEngine(t, c)
	want := []policy.Action{policy.Pass, policy.Warn, policy.Hold, policy.Hold, policy.Hold}
	for i, w := range want {
		d := msg{user: "dave", inst: fmt.Sprint("d", i)}.eom(e, t0, 1)
		if d.Action != w {
			t.Fatalf("message %d: %v, want %v (%s)", i+1, d.Action, w, d.Reason)
		}
		if w == policy.Warn && !strings.HasPrefix(d.Header, "X-Ratelimitd-Warning: limit=warn") {
			t.Fatalf("warn header %q", d.Header)
		}
		if w == policy.Hold && d.Limit != "hold" {
			t.Fatalf("message %d decided by %q, want hold", i+1, d.Limit)
		}
	}
	// Another sender of the domain meets only the reject limit.
	if d := (msg{user: "eve", inst: "e1"}).eom(e, t0, 1); d.Action != policy.Reject || d.Code != 550 || d.Enhanced != "5.7.1" {
		t.Fatalf("eve's message: %+v, want reject 550 5.7.1", d)
	}
}

// TestLaterStageOrderedAgainstMessageVerdict: a message held at RCPT meets
// a per_byte limit at END-OF-MESSAGE; the limit first in the stack
// decides, whichever request measured it.
func TestLaterStageOrderedAgainstMessageVerdict(t *testing.T) {
	bytes := policy.LimitConfig{Name: "bytes", Key: []string{"sasl_username"}, Limit: 10000,
		Period: policy.Duration(time.Hour), Per: "byte", Action: "defer"}
	hold := ladderLimit("hold", "hold", "strict", 1)
	for _, tc := range []struct {
		name   string
		limits []policy.LimitConfig
		want   policy.Action
	}{
		{"bytes first", []policy.LimitConfig{bytes, hold}, policy.Defer},
		{"hold first", []policy.LimitConfig{hold, bytes}, policy.Hold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, policy.Config{Limits: tc.limits})
			msg{user: "ian", inst: "i1", rcpts: 1, size: 100, stage: policy.ViaPolicy}.send(e, t0, true, true)
			rc, end := msg{user: "ian", inst: "i2", rcpts: 1, size: 50000, stage: policy.ViaPolicy}.send(e, t0, true, true)
			if rc[0].Action != policy.Hold {
				t.Fatalf("RCPT: %v, want hold", rc[0].Action)
			}
			if end.Action != tc.want {
				t.Fatalf("END-OF-MESSAGE: %v (%s), want %v", end.Action, end.Reason, tc.want)
			}
		})
	}
}

// TestMeasureOnlyLimitDoesNotHideAWarning: an over "pass" limit measures
// only; a later warn limit still warns.
func TestMeasureOnlyLimitDoesNotHideAWarning(t *testing.T) {
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{
		ladderLimit("measure", "pass", "leaky", 1),
		ladderLimit("watch", "warn", "leaky", 1),
	}})
	checkLadder(t, "kim", answers(t, e, "kim", 3), want(3, []int{1, 2}, []policy.Action{policy.Pass, policy.Warn}))
}
