package policy_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// ladders returns the ladders of an engine on c.
func ladders(c policy.Config) ([]policy.Ladder, error) {
	e, err := policy.NewEngine(c, nil)
	if err != nil {
		return nil, err
	}
	return e.Ladders(), nil
}

func stepsOf(ld policy.Ladder) string {
	var s []string
	for _, st := range ld.Steps {
		x := st.String()
		if st.Shadowed != "" {
			x += " [after " + st.Shadowed + "]"
		}
		s = append(s, x)
	}
	return strings.Join(s, "; ")
}

// TestLaddersOfTheDefaultStack: one ladder, in file order.
func TestLaddersOfTheDefaultStack(t *testing.T) {
	lds, err := ladders(hourlyDaily())
	if err != nil {
		t.Fatal(err)
	}
	if len(lds) != 1 || stepsOf(lds[0]) != "hourly defers above 200/h; daily defers above 1,000/24h" {
		t.Fatalf("ladders %+v", lds)
	}
	if w := policy.LadderWarnings(hourlyDaily()); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
}

// TestLadderWarnsAboutAStepThatNeverAnswers: [defer 5/h leaky, hold 8/h
// strict]: hold never answers; written the other way round, both do.
// Other keys, cost units and thresholds make their own ladders or answer.
func TestLadderWarnsAboutAStepThatNeverAnswers(t *testing.T) {
	shadowed := policy.Config{Limits: []policy.LimitConfig{
		ladderLimit("hourly", "defer", "leaky", 5),
		ladderLimit("hold", "hold", "strict", 8),
	}}
	w := policy.LadderWarnings(shadowed)
	if len(w) != 1 || w[0] != "limit hold can never answer: hourly, earlier over the same key and counting, defers above 5/h first" {
		t.Fatalf("warnings %q", w)
	}
	lds, _ := ladders(shadowed)
	if len(lds) != 1 || stepsOf(lds[0]) != "hourly defers above 5/h; hold holds above 8/h [after hourly]" {
		t.Fatalf("ladders %+v", lds)
	}
	ordered := policy.Config{Limits: []policy.LimitConfig{
		ladderLimit("hold", "hold", "strict", 8),
		ladderLimit("hourly", "defer", "leaky", 5),
	}}
	if w := policy.LadderWarnings(ordered); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	// A burst limit with a lower count but a higher rate per hour does not
	// shadow the hourly one; a warn limit shadows nothing.
	burst := ladderLimit("burst", "freeze", "strict", 30)
	burst.Period = policy.Duration(time.Minute)
	warn := ladderLimit("watch", "warn", "leaky", 1)
	other := ladderLimit("rcpts", "defer", "leaky", 100)
	other.Per = "rcpt"
	byIP := ladderLimit("ip", "defer", "leaky", 1000)
	byIP.Key = []string{"client_address"}
	c := policy.Config{Limits: []policy.LimitConfig{warn, burst, ladderLimit("hourly", "defer", "leaky", 200), other, byIP}}
	if w := policy.LadderWarnings(c); len(w) != 0 {
		t.Fatalf("warnings %q", w)
	}
	lds, _ = ladders(c)
	if len(lds) != 3 || stepsOf(lds[0]) != "watch warns above 1/h; burst freezes above 30/1m; hourly defers above 200/h" ||
		lds[1].Per != "rcpt" || lds[2].Key[0] != "client_address" {
		t.Fatalf("ladders %+v", lds)
	}
	// The same limit with a lower daily count does shadow: 150/24h is under
	// 200/h as a count and as a rate.
	daily := ladderLimit("daily", "defer", "strict", 150)
	daily.Period = policy.Duration(24 * time.Hour)
	if w := policy.LadderWarnings(policy.Config{Limits: []policy.LimitConfig{daily, ladderLimit("hourly", "defer", "leaky", 200)}}); len(w) != 1 ||
		!strings.HasPrefix(w[0], "limit hourly can never answer: daily") {
		t.Fatalf("warnings %q", w)
	}
}

// TestLadderWarnsAboutAMilterLimitBehindPolicyDefer: a strict freeze
// measured only by the milter never counts what policy delegation defers
// at RCPT; with both on the milter there is nothing to warn about.
func TestLadderWarnsAboutAMilterLimitBehindPolicyDefer(t *testing.T) {
	freeze := ladderLimit("freeze", "freeze", "strict", 8)
	freeze.Via = []string{policy.ViaMilter}
	hourly := ladderLimit("hourly", "defer", "leaky", 5)
	w := policy.LadderWarnings(policy.Config{Limits: []policy.LimitConfig{freeze, hourly}})
	if len(w) != 1 || !strings.HasPrefix(w[0], "limit freeze (strict, via milter) never counts the attempts hourly defers through policy delegation") ||
		!strings.Contains(w[0], `via = ["milter"] for hourly too`) {
		t.Fatalf("warnings %q", w)
	}
	hourly.Via = []string{policy.ViaMilter}
	if w := policy.LadderWarnings(policy.Config{Limits: []policy.LimitConfig{freeze, hourly}}); len(w) != 0 {
		t.Fatalf("both via the milter: warnings %q", w)
	}
}

// TestNextStep: the ladder's step at the next higher threshold.
func TestNextStep(t *testing.T) {
	daily := ladderLimit("daily", "freeze", "strict", 1000)
	daily.Period = policy.Duration(24 * time.Hour)
	e := newEngine(t, policy.Config{Limits: []policy.LimitConfig{daily, ladderLimit("hourly", "defer", "leaky", 200)}})
	for limit, want := range map[string]string{"hourly": "daily freezes above 1,000/24h", "daily": "", "nosuch": ""} {
		if got := e.NextStep(limit); got != want {
			t.Errorf("NextStep(%q) = %q, want %q", limit, got, want)
		}
	}
}
