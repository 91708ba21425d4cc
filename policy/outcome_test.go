package policy_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

func outcomeEngine(t *testing.T, extra ...policy.LimitConfig) *policy.Engine {
	t.Helper()
	limits := append([]policy.LimitConfig{{Name: "unknown", Key: policy.KeyList{"sasl_username"}, Per: "unknown_rcpt",
		Limit: 10, Period: policy.Duration(time.Hour), Action: "freeze"}}, extra...)
	return newEngine(t, policy.Config{Limits: limits})
}

// TestOutcomeLimitRefusesTheMessageAfterTheTenthUnknown sends messages
// under every volume limit whose recipients all come back unknown: the
// first message after the tenth unknown recipient is frozen, with a reason
// that says what failed.
func TestOutcomeLimitRefusesTheMessageAfterTheTenthUnknown(t *testing.T) {
	for round := range 5 { // the result must not depend on the spacing
		e := outcomeEngine(t, policy.LimitConfig{Name: "volume", Key: policy.KeyList{"sasl_username"}, Limit: 200,
			Period: policy.Duration(time.Hour)})
		now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
		step := time.Duration(round+1) * 7 * time.Second
		m := msg{user: "alice", rcpts: 1}
		for i := range 30 {
			m.inst = string(rune('a' + i))
			_, end := m.send(e, now, true, true)
			if i < 10 && end.Action != policy.Pass {
				t.Fatalf("round %d: message %d after %d unknown recipients: %v (%s), want pass", round, i+1, i, end.Action, end.Reason)
			}
			if i == 10 {
				if end.Action != policy.Freeze || end.Limit != "unknown" {
					t.Fatalf("round %d: message 11 after 10 unknown recipients: %v by %q, want freeze by unknown", round, end.Action, end.Limit)
				}
				if !strings.Contains(end.Reason, "unknown users") || !strings.Contains(end.Reason, `"alice"`) {
					t.Errorf("reason %q does not say whose recipients failed and how", end.Reason)
				}
				return
			}
			r := m.req(policy.StateEndOfMessage)
			r.Recipient = "nobody@example.net"
			n, err := e.RecordOutcome(context.Background(), now.Add(step/2), r, policy.OutcomeUnknownRcpt)
			if err != nil || n != 1 {
				t.Fatalf("RecordOutcome = %d, %v; want 1 limit counted", n, err)
			}
			now = now.Add(step)
		}
	}
}

// TestOutcomeKindsCountInTheirLimits: a bounce counts in per = "bounce"
// only, an unknown recipient in "bounce" and "unknown_rcpt", a deferral in
// "deferral" only; an exempt user nowhere.
func TestOutcomeKindsCountInTheirLimits(t *testing.T) {
	lim := func(name, per string) policy.LimitConfig {
		return policy.LimitConfig{Name: name, Key: policy.KeyList{"sasl_username"}, Per: per, Limit: 5, Period: policy.Duration(time.Hour)}
	}
	c := policy.Config{Exempt: policy.Exempt{Users: []string{"postmaster"}},
		Limits: []policy.LimitConfig{lim("b", "bounce"), lim("u", "unknown_rcpt"), lim("d", "deferral"), lim("v", "mail")}}
	e := newEngine(t, c)
	now := time.Now()
	for _, tc := range []struct {
		user string
		kind policy.OutcomeKind
		want int
	}{{"alice", policy.OutcomeBounce, 1}, {"alice", policy.OutcomeUnknownRcpt, 2}, {"alice", policy.OutcomeDeferral, 1},
		{"postmaster", policy.OutcomeUnknownRcpt, 0}, {"", policy.OutcomeBounce, 0}} {
		req := &policy.Request{SASLUsername: tc.user, Sender: "x@example.org", Recipient: "r@example.net"}
		n, err := e.RecordOutcome(context.Background(), now, req, tc.kind)
		if err != nil || n != tc.want {
			t.Errorf("%s %v: counted in %d limits (%v), want %d", tc.user, tc.kind, n, err, tc.want)
		}
	}
}

// TestFewBouncesNeverRefuse: a sender with 2 of 100 recipients bouncing is
// never refused by a 10/1h unknown-recipient limit.
func TestFewBouncesNeverRefuse(t *testing.T) {
	e := outcomeEngine(t)
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := msg{user: "bob", rcpts: 1}
	for i := range 100 {
		m.inst = string(rune(0x100 + i))
		_, end := m.send(e, now, true, true)
		if end.Action != policy.Pass {
			t.Fatalf("message %d: %v (%s)", i, end.Action, end.Reason)
		}
		if i%50 == 7 {
			if _, err := e.RecordOutcome(context.Background(), now, m.req(policy.StateEndOfMessage), policy.OutcomeUnknownRcpt); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(10 * time.Second)
	}
}

func TestClassifyDSN(t *testing.T) {
	for in, want := range map[string]policy.OutcomeKind{"5.1.1": policy.OutcomeUnknownRcpt, "5.1.10": policy.OutcomeUnknownRcpt,
		"5.1.0": policy.OutcomeUnknownRcpt, "5.1.2": policy.OutcomeBounce, "5.7.1": policy.OutcomeBounce,
		"4.4.1": policy.OutcomeDeferral, "2.0.0": 0, "": 0, "5.1": 0, "5.1.1x": 0, "5.1111.1": 0, "x.1.1": 0} {
		got, ok := policy.ClassifyDSN(in)
		if got != want || ok != (want != 0) {
			t.Errorf("ClassifyDSN(%q) = %v, %v; want %v", in, got, ok, want)
		}
	}
}

func TestOutcomePerIsValidated(t *testing.T) {
	err := policy.Check(policy.Config{Limits: []policy.LimitConfig{{Name: "x", Key: policy.KeyList{"sender"}, Per: "bounces",
		Limit: 1, Period: policy.Duration(time.Hour)}}})
	if err == nil || !strings.Contains(err.Error(), "unknown_rcpt") {
		t.Errorf("per = \"bounces\": %v, want an error naming the outcome units", err)
	}
}

// ratioLimit is the documented ratio form: more than 10% of at least 50
// recipients per hour bounced.
var ratioLimit = policy.LimitConfig{Name: "bounce-ratio", Key: policy.KeyList{"sasl_username"}, Per: "bounce",
	Ratio: 0.10, MinCount: 50, Period: policy.Duration(time.Hour), Action: "freeze"}

// sendWithOutcomes sends n one-recipient messages of user 10s apart,
// each counted as a recipient; bounces(i) says whether message i bounces.
// It returns the first refused message's number (n+1: none) and decision.
func sendWithOutcomes(t *testing.T, e *policy.Engine, user string, n int, bounces func(i int) bool) (int, policy.Decision) {
	t.Helper()
	return sendWithKinds(t, e, user, n, func(i int) policy.OutcomeKind {
		if bounces(i) {
			return policy.OutcomeUnknownRcpt
		}
		return 0
	})
}

// sendWithKinds is sendWithOutcomes with kind(i) the outcome of message
// i's recipient (0: delivered).
func sendWithKinds(t *testing.T, e *policy.Engine, user string, n int, kind func(i int) policy.OutcomeKind) (int, policy.Decision) {
	t.Helper()
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := msg{user: user, rcpts: 1}
	for i := range n {
		m.inst = fmt.Sprint(i)
		if _, end := m.send(e, now, true, true); end.Action != policy.Pass {
			return i + 1, end
		}
		r := m.req(policy.StateEndOfMessage)
		if _, err := e.RecordRecipients(ctx, now, r, 1); err != nil {
			t.Fatal(err)
		}
		if k := kind(i); k != 0 {
			if _, err := e.RecordOutcome(ctx, now.Add(5*time.Second), r, k); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(10 * time.Second)
	}
	return n + 1, policy.Decision{}
}

// TestBounceLimitSaysHowManyWereUnknownUsers: a bounce limit beside an
// unknown_rcpt limit on the same key and period says how many of its
// bounces were unknown users; alone, it says only that they bounced.
func TestBounceLimitSaysHowManyWereUnknownUsers(t *testing.T) {
	unknown := policy.LimitConfig{Name: "unknown", Key: policy.KeyList{"sasl_username"}, Per: "unknown_rcpt",
		Limit: 1000, Period: policy.Duration(time.Hour), Action: "warn"}
	// Of every 60 recipients 24 bounce, 18 of them (3 in 4) as unknown users.
	kind := func(i int) policy.OutcomeKind {
		switch {
		case i%5 > 1:
			return 0
		case i%10 == 1:
			return policy.OutcomeBounce
		}
		return policy.OutcomeUnknownRcpt
	}
	for _, c := range []struct {
		limits []policy.LimitConfig
		want   *regexp.Regexp
	}{
		{[]policy.LimitConfig{ratioLimit, unknown}, regexp.MustCompile(`^(\d+) of the last (\d+) recipients bounced, (\d+) as unknown users \(limit 10% of at least 50 per 1h\)$`)},
		{[]policy.LimitConfig{ratioLimit}, regexp.MustCompile(`^(\d+) of the last (\d+) recipients bounced \(limit 10% of at least 50 per 1h\)$`)},
		{[]policy.LimitConfig{ratioLimit, func() policy.LimitConfig { u := unknown; u.Period = policy.Duration(time.Minute); return u }()},
			regexp.MustCompile(`^(\d+) of the last (\d+) recipients bounced \(limit`)},
	} {
		e := newEngine(t, policy.Config{Limits: c.limits})
		at, d := sendWithKinds(t, e, "alice", 70, kind)
		if at > 70 || d.Limit != "bounce-ratio" {
			t.Fatalf("%d limits: refused at %d by %q, want the ratio limit", len(c.limits), at, d.Limit)
		}
		m := c.want.FindStringSubmatch(d.Outcome)
		if m == nil || !strings.Contains(d.Reason, d.Outcome) {
			t.Fatalf("%d limits: outcome %q, reason %q, want %v", len(c.limits), d.Outcome, d.Reason, c.want)
		}
		if len(m) == 4 {
			bounced, _ := strconv.Atoi(m[1])
			unknowns, _ := strconv.Atoi(m[3])
			if unknowns < bounced/2 || unknowns >= bounced {
				t.Errorf("outcome %q: want about 3 in 4 bounces as unknown users", d.Outcome)
			}
		}
		t.Logf("%s", d.Outcome)
	}
}

// TestRatioLimitRefusesAHighShareOfFailures: 2 of 100 recipients bouncing
// are never refused; 23 of 60 are, once 50 recipients were counted, and
// the decision says how many of how many failed.
func TestRatioLimitRefusesAHighShareOfFailures(t *testing.T) {
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{ratioLimit}})
	if at, d := sendWithOutcomes(t, e, "bob", 100, func(i int) bool { return i == 30 || i == 70 }); at <= 100 {
		t.Fatalf("bob's message %d: %v (%s), want none refused", at, d.Action, d.Reason)
	}
	at, d := sendWithOutcomes(t, e, "alice", 61, func(i int) bool { return i*23/60 != (i+1)*23/60 })
	if at <= 50 || at > 61 || d.Action != policy.Freeze || d.Limit != "bounce-ratio" {
		t.Fatalf("alice refused at message %d: %v by %q, want freeze after her 50th recipient", at, d.Action, d.Limit)
	}
	if !strings.Contains(d.Outcome, "recipients bounced (limit 10% of at least 50 per 1h)") || !strings.Contains(d.Reason, d.Outcome) ||
		d.RetryAfter <= 0 || d.RetryAfter > time.Hour || !strings.HasPrefix(d.Text, "too many of your recent recipients failed; try again in ") {
		t.Errorf("outcome %q, reason %q, retry after %v, text %q", d.Outcome, d.Reason, d.RetryAfter, d.Text)
	}
	t.Logf("refused at message %d: %s; retry after %v", at, d.Outcome, d.RetryAfter)
}

// A ratio limit whose recipients' state cannot be read fails open and
// says so: the decision carries the store's error, which the daemon logs
// and counts as a fault, alone or beside another limit's verdict.
func TestRatioLimitStoreErrorIsAFault(t *testing.T) {
	tight := policy.LimitConfig{Name: "tight", Key: policy.KeyList{"sasl_username"}, Limit: 1, Period: policy.Duration(time.Hour)}
	for _, c := range []struct {
		limits []policy.LimitConfig
		want   policy.Action
	}{
		{[]policy.LimitConfig{ratioLimit}, policy.Pass},
		{[]policy.LimitConfig{ratioLimit, tight}, policy.Defer},
	} {
		store := oneLimitFails{Store: ratestore.NewMemory(ratestore.MemoryOptions{}), limit: "bounce-ratio/rcpt"}
		e, err := policy.NewEngine(policy.Config{Limits: c.limits}, store)
		if err != nil {
			t.Fatal(err)
		}
		e.Evaluate(context.Background(), t0, eom("rita"))
		d := e.Evaluate(context.Background(), t0, eom("rita"))
		if d.Action != c.want || !errors.Is(d.Fault, ratestore.ErrKeyTooLong) {
			t.Errorf("%d limits: %v, fault %v; want %v and the store's error", len(c.limits), d.Action, d.Fault, c.want)
		}
	}
}

func TestRatioFormIsValidated(t *testing.T) {
	for _, c := range []struct {
		change func(*policy.LimitConfig)
		want   string
	}{
		{func(l *policy.LimitConfig) { l.Per = "mail" }, "ratio: needs per"},
		{func(l *policy.LimitConfig) { l.Ratio = 1.5 }, "less than 1"},
		{func(l *policy.LimitConfig) { l.MinCount = 0 }, "min_count"},
		{func(l *policy.LimitConfig) { l.Limit = 10 }, "not limit"},
		{func(l *policy.LimitConfig) { l.Algorithm = "gcra" }, "exponential"},
	} {
		l := ratioLimit
		c.change(&l)
		if err := policy.Check(policy.Config{Limits: []policy.LimitConfig{l}}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", l, err, c.want)
		}
	}
}

// TestNewsletterStaysUnderTheDefaultRatio: one message to 10,000
// addresses of which 2% bounce over the next ten minutes leaves its
// sender under the documented default (more than 10% of at least 50 per
// hour).
func TestNewsletterStaysUnderTheDefaultRatio(t *testing.T) {
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{ratioLimit}})
	ctx := context.Background()
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	m := msg{user: "news", rcpts: 1, inst: "list"}
	if _, end := m.send(e, now, true, true); end.Action != policy.Pass {
		t.Fatalf("the newsletter: %v", end.Action)
	}
	r := m.req(policy.StateEndOfMessage)
	if _, err := e.RecordRecipients(ctx, now, r, 10_000); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := e.RecordOutcome(ctx, now.Add(time.Duration(i)*3*time.Second), r, policy.OutcomeUnknownRcpt); err != nil {
			t.Fatal(err)
		}
	}
	m.inst = "next"
	if _, end := m.send(e, now.Add(10*time.Minute), true, true); end.Action != policy.Pass {
		t.Errorf("the next message: %v (%s), want pass", end.Action, end.Reason)
	}
}

// TestRatesShowTheRatioFormsRecipients: rate list and rate show fold a
// ratio limit's recipients into its row (failures of recipients, over
// when more than the ratio of at least min_count failed), list a sender
// with recipients and no failures, and show no row of the recipients'
// own state.
func TestRatesShowTheRatioFormsRecipients(t *testing.T) {
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{ratioLimit}})
	sendWithOutcomes(t, e, "bob", 60, func(int) bool { return false })
	at, _ := sendWithOutcomes(t, e, "alice", 61, func(i int) bool { return i*23/60 != (i+1)*23/60 })
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(at-1) * 10 * time.Second) // when alice was refused
	ctx := context.Background()
	all, err := e.All(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := e.Lookup(ctx, now, "alice")
	rows := map[string]policy.KeyRate{}
	for _, kr := range all {
		if kr.Limit != "bounce-ratio" {
			t.Fatalf("row of limit %q: %+v", kr.Limit, kr)
		}
		rows[kr.Key] = kr
	}
	a, b := rows["alice"], rows["bob"]
	if len(rows) != 2 || a.Ratio != 0.1 || a.MinCount != 50 || a.Recipients < 50 || a.Rate < 0.1*a.Recipients || !a.Over ||
		!a.Refusing || a.RetryAfter <= 0 || a.Max != 0.1*a.Recipients {
		t.Fatalf("rate list: alice %+v", a)
	}
	if b.Recipients < 40 || b.Rate != 0 || b.Over || b.Refusing || b.Max != 0.1*max(b.Recipients, 50) {
		t.Fatalf("rate list: bob %+v", b)
	}
	if len(alice) != 1 || alice[0].Recipients != a.Recipients || alice[0].Over != a.Over || !alice[0].Answers {
		t.Fatalf("rate show alice: %+v, want %+v", alice, a)
	}
}
