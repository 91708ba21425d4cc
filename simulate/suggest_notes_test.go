package simulate_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// TestSuggestSaysWhenTheTraceIsTooThin: a trace of 5 users over 3 hours
// under an hourly and a daily limit: the text says that 5 keys are too
// few for a p95 and that the proposal is the highest peak instead, and
// that 3 hours are less than the daily period (before: "hourly 310,
// daily 310" with no word of either). With 25 users over two days there
// is no such note.
func TestSuggestSaysWhenTheTraceIsTooThin(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour)},
		{Name: "daily", Key: []string{"sasl_username"}, Limit: 1000, Period: policy.Duration(24 * time.Hour)},
	}}
	suggest := func(users int, span time.Duration) (*simulate.Suggestion, string) {
		var b strings.Builder
		for u := 0; u < users; u++ {
			fmt.Fprintf(&b, `{"time":"2026-11-02T09:00:00Z","sasl_username":"u%02d","count":%d,"every":"%s"}`+"\n",
				u, 20+u, (span / time.Duration(20+u)).String())
		}
		s := suggestFrom(t, cfg, b.String(), simulate.SuggestOptions{})
		var out bytes.Buffer
		if err := s.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		return s, out.String()
	}
	s, text := suggest(5, 3*time.Hour)
	for _, want := range []string{
		"only 5 ordinary keys: too few for a p95 (it takes 20); the proposal is based on the highest ordinary peak",
		"the trace spans 2h52m, less than the period 24h",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if !s.Limits[1].TooShort || s.Limits[0].TooShort {
		t.Errorf("TooShort: hourly %v, daily %v", s.Limits[0].TooShort, s.Limits[1].TooShort)
	}
	if _, text := suggest(25, 48*time.Hour); strings.Contains(text, "Note: only") || strings.Contains(text, "less than the period") {
		t.Errorf("25 keys over two days got a note:\n%s", text)
	}
}
