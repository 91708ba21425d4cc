package simulate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// TestReplayCountsOutcomes replays a trace's outcome lines into an outcome
// limit of 2 unknown recipients an hour: mallory's messages after her
// second unknown recipient are frozen, and the unknown recipients of the
// frozen messages are not hers (the replay excludes them), so her rate
// decays under the limit and her message at 18:50 passes. Bob's mail is
// never refused, and outcome lines reach the callback undecided.
func TestReplayCountsOutcomes(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{{Name: "unknown", Key: []string{"sasl_username"}, Per: "unknown_rcpt",
		Limit: 2, Period: policy.Duration(time.Hour), Action: "freeze", Mode: "strict"}}}
	msg := func(min int, user, inst string) string {
		return `{"time":"2026-11-20T18:` + two(min) + `:00Z","sasl_username":"` + user + `","instance":"` + inst + `"}` + "\n"
	}
	bad := func(min int, user, inst string) string {
		return `{"time":"2026-11-20T18:` + two(min) + `:30Z","sasl_username":"` + user + `","instance":"` + inst +
			`","recipient":"x` + two(min) + `@example.net","outcome":"unknown_rcpt"}` + "\n"
	}
	trace := msg(0, "mallory", "m1") + bad(0, "mallory", "m1") + msg(1, "mallory", "m2") + bad(1, "mallory", "m2") +
		msg(2, "mallory", "m3") + bad(2, "mallory", "m3") + msg(3, "mallory", "m4") + bad(3, "mallory", "m4") +
		msg(50, "mallory", "m5") + msg(4, "bob", "b1") + bad(4, "bob", "b1")
	for round := 0; round < 3; round++ {
		e, err := policy.NewEngine(c, ratestore.NewMemory(ratestore.MemoryOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		outcomes := 0
		replayAll(t, e, trace, func(r *simulate.Result) {
			if r.Outcome != 0 {
				outcomes++
				if r.Decision.Action != policy.Pass || r.Decision.Fault != nil {
					t.Fatalf("outcome line decided: %+v", r.Decision)
				}
				return
			}
			got = append(got, r.Request.Instance+"="+r.Decision.Action.String())
		})
		want := "m1=pass m2=pass m3=freeze m4=freeze b1=pass m5=pass"
		if strings.Join(got, " ") != want || outcomes != 3 {
			t.Fatalf("round %d: decisions %q, want %q; %d outcomes replayed, want 3 (m3's and m4's excluded)", round,
				strings.Join(got, " "), want, outcomes)
		}
	}
}

// TestTraceOutcomeField reads the outcome field and refuses an unknown one.
func TestTraceOutcomeField(t *testing.T) {
	tr := read(t, simulate.FormatCSV, "time,sasl_username,recipient,outcome\n2026-11-20T18:00:00Z,alice,x@example.net,bounce\n")
	if e := tr.Entries[0]; e.Outcome != policy.OutcomeBounce || e.Request.RecipientCount != 0 {
		t.Fatalf("entry %+v", e)
	}
	_, err := simulate.Read(strings.NewReader(`{"time":"2026-11-20T18:00:00Z","outcome":"spam"}`), "")
	if err == nil || !strings.Contains(err.Error(), `unknown outcome "spam"`) {
		t.Fatalf("err = %v", err)
	}
}

func two(n int) string { return string(rune('0'+n/10)) + string(rune('0'+n%10)) }
