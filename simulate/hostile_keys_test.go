package simulate_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// hostileUser is an envelope sender from a hostile mail log: an OSC title
// change, a screen clear, a C1 CSI and a right-to-left override.
const hostileUser = "\x1b]0;owned\x07\x1b[2Jev\u009b6nil\u202eexe.txt@example.org"

// TestTablesShowHostileKeysSafely: the decision and summary tables of
// simulate (and suggest, which prints the same keys) printed keys from the
// trace raw; now no control or bidirectional character reaches the
// operator's terminal, while JSON keeps the key exact.
func TestTablesShowHostileKeysSafely(t *testing.T) {
	e := stacked(t)
	trace := `{"time":"2026-11-20T18:00:00Z","sender":"` + strings.NewReplacer("\x1b", `\u001b`, "\x07", `\u0007`, "\u009b", `\u009b`, "\u202e", `\u202e`).Replace(hostileUser) +
		`","client_address":"192.0.2.9","count":3}` + "\n"
	var table, jsonl bytes.Buffer
	tw, err := simulate.NewWriter(&table, simulate.OutputTable, e.Limits(), t0)
	if err != nil {
		t.Fatal(err)
	}
	jw, _ := simulate.NewWriter(&jsonl, simulate.OutputJSONL, e.Limits(), t0)
	sum := simulate.NewSummarizer(e.Limits(), simulate.Filter{})
	replayAll(t, e, trace, func(r *simulate.Result) {
		tw.Write(r)
		jw.Write(r)
		sum.Add(r)
	})
	tw.Close()
	jw.Close()
	var st bytes.Buffer
	if err := sum.Summary().Write(&st, simulate.OutputTable); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"decisions": table.String(), "summary": st.String()} {
		for _, r := range out {
			if r != '\n' && r != '\t' && termsafe.Unsafe(r) {
				t.Fatalf("%s table carries %U:\n%q", name, r, out)
			}
		}
	}
	if !strings.Contains(jsonl.String(), `\u001b]0;owned\u0007`) {
		t.Fatalf("JSON Lines lost the exact key:\n%s", jsonl.String())
	}
}
