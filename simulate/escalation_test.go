package simulate_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// escalationEngine builds an engine from a configuration file under
// testdata/escalation (path relative to the repository root).
func escalationEngine(t *testing.T, path string) *policy.Engine {
	t.Helper()
	f, err := config.Load("../" + path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.NewEngine(f.PolicyConfig(), ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestEscalationLaddersPrintWhatDocsSay: every "$ ratelimitd simulate -c
// CONFIG --summary TRACE" block of docs/limits.md prints what follows it.
func TestEscalationLaddersPrintWhatDocsSay(t *testing.T) {
	doc, err := os.ReadFile("../docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, block := range strings.Split(string(doc), "```\n")[1:] {
		cmd, want, ok := strings.Cut(block, "\n")
		if !ok || !strings.HasPrefix(cmd, "$ ratelimitd simulate -c ") {
			continue
		}
		blocks++
		f := strings.Fields(cmd)
		if len(f) != 7 || f[5] != "--summary" {
			t.Fatalf("docs/limits.md: %q is not \"$ ratelimitd simulate -c CONFIG --summary TRACE\"", cmd)
		}
		e := escalationEngine(t, f[4])
		tr, err := simulate.ReadFile("../"+f[6], "")
		if err != nil {
			t.Fatal(err)
		}
		sum := simulate.NewSummarizer(e.Limits(), simulate.Filter{})
		if err := simulate.Replay(context.Background(), e, tr.Events(), func(r *simulate.Result) error {
			sum.Add(r)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := sum.Summary().Write(&got, simulate.OutputTable); err != nil {
			t.Fatal(err)
		}
		if got.String() != want {
			t.Errorf("%s\nprints:\n%s\ndocs/limits.md says:\n%s", cmd, got.String(), want)
		}
	}
	if blocks != 4 {
		t.Fatalf("docs/limits.md has %d simulate blocks, want 4 (relay, submission, slow day, burst)", blocks)
	}
}

// TestEscalationSlowRunFrozenFromFirstDailyRefusal: [freeze 1000/24h
// strict, defer 200/h leaky] against 150 messages an hour for a day
// freezes exactly the messages the daily limit is over, every one from
// the first it refuses, and defers none.
func TestEscalationSlowRunFrozenFromFirstDailyRefusal(t *testing.T) {
	e := escalationEngine(t, "simulate/testdata/escalation/submission.toml")
	tr, err := simulate.ReadFile("../simulate/testdata/escalation/slow-day.jsonl", "")
	if err != nil {
		t.Fatal(err)
	}
	first, n := 0, 0
	err = simulate.Replay(context.Background(), e, tr.Events(), func(r *simulate.Result) error {
		n++
		d := &r.Decision
		var dailyOver bool
		for _, m := range d.Measures {
			if m.Limit == "daily" {
				dailyOver = m.Over
			}
		}
		if dailyOver != (d.Action == policy.Freeze) {
			t.Fatalf("message %d: %v by %q, daily over %v", n, d.Action, d.Limit, dailyOver)
		}
		if d.Action == policy.Freeze && first == 0 {
			first = n
		}
		if first > 0 && d.Action != policy.Freeze {
			t.Fatalf("message %d after the first frozen (%d): %v", n, first, d.Action)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3600 || first < 1050 || first > 1250 {
		t.Fatalf("%d messages, the first frozen is the %dth; want 3600, about the 1,100th", n, first)
	}
}
