package simulate_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit/store"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// TestSuggestVia: a limit bound to one front end (via) is still measured
// and replayed, even for the other front end's requests (trace requests
// come from policy delegation; the limit is the milter's). Before, its keys
// were never measured and the configured limit was kept unexamined.
func TestSuggestVia(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour), Via: []string{"milter"}},
	}}
	tr, err := simulate.Read(strings.NewReader(`{"time":"2026-11-02T09:00:00Z","sasl_username":"alice","count":10,"every":"1m"}
{"time":"2026-11-02T09:00:00Z","sasl_username":"bob","count":300,"every":"1s"}
`), simulate.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	s, err := simulate.Suggest(t.Context(), cfg, tr, simulate.SuggestOptions{Percentile: 50,
		NewStore: func() policy.Store { return store.NewMemory(store.MemoryOptions{}) }})
	if err != nil {
		t.Fatal(err)
	}
	lp := s.Limits[0]
	if len(lp.Peaks) != 2 || lp.Proposed >= 200 || len(lp.Outliers) != 1 || lp.Outliers[0].Key != "bob" {
		t.Fatalf("proposal %+v", lp)
	}
	if s.Refusal("bob") == nil || s.Refusal("alice") != nil {
		t.Fatalf("refusals %+v", s.Refusals)
	}
	if got := s.Config.Limits[0].Via; len(got) != 1 || got[0] != "milter" {
		t.Fatalf("the proposal lost via: %v", got)
	}
	toml, err := s.TOML()
	if err != nil || !strings.Contains(toml, `via = ["milter"]`) {
		t.Fatalf("TOML %v:\n%s", err, toml)
	}
}
