package policy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
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
