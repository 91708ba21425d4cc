package simulate_test

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
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
	s := suggestFrom(t, cfg, `{"time":"2026-11-02T09:00:00Z","sasl_username":"alice","count":10,"every":"1m"}
{"time":"2026-11-02T09:00:00Z","sasl_username":"bob","count":300,"every":"1s"}
`, simulate.SuggestOptions{Percentile: 50})
	lp := s.Limits[0]
	if len(lp.Peaks) != 2 || lp.Proposed >= 200 || len(lp.Outliers) != 1 || lp.Outliers[0].Key != "bob" {
		t.Fatalf("proposal %+v", lp)
	}
	if refused := func(k string) bool {
		return slices.ContainsFunc(s.Refusals, func(r simulate.Refusal) bool { return r.Key == k })
	}; !refused("bob") || refused("alice") {
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

// TestSuggestPerAddr: a per = "addr" limit measures unique recipients
// when Suggest has recipient memory, as the daemon does: sixty messages to
// one address peak at one recipient, sixty to new addresses near sixty.
func TestSuggestPerAddr(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "addr", Key: []string{"sasl_username"}, Per: "addr", Limit: 500, Period: policy.Duration(time.Hour)},
	}}
	var b strings.Builder
	for i := range 60 {
		at := time.Date(2026, 11, 2, 9, i, 0, 0, time.UTC).Format(time.RFC3339)
		fmt.Fprintf(&b, `{"time":%q,"sasl_username":"alice","recipient":"boss@example.net"}`+"\n", at)
		fmt.Fprintf(&b, `{"time":%q,"sasl_username":"bob","recipient":"r%d@example.net"}`+"\n", at, i)
	}
	s := suggestFrom(t, cfg, b.String(), simulate.SuggestOptions{
		NewRecipientSets: func() policy.RecipientSets { return ratestore.NewRecipients(ratestore.RecipientOptions{}) },
	})
	peaks := map[string]float64{}
	for _, p := range s.Limits[0].Peaks {
		peaks[p.Key] = p.Peak
	}
	if peaks["alice"] > 1.5 || peaks["bob"] < 30 {
		t.Fatalf("peaks %v: want alice about 1 (one recipient), bob tens", peaks)
	}
}

// TestSuggestTOMLKeepsSettings: a baseline limit is measured (the
// measuring replay used to keep its floor and cap with the exponential
// algorithm, and Suggest failed), and the proposed [[limit]] tables keep
// every setting Suggest does not propose (baseline parameters,
// auto_release), so pasting them does not silently drop any.
func TestSuggestTOMLKeepsSettings(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "held", Key: []string{"sasl_username"}, Limit: 100, Period: policy.Duration(time.Hour), Action: "hold", AutoRelease: "drip"},
		{Name: "learned", Key: []string{"sasl_username"}, Limit: 1000, Period: policy.Duration(24 * time.Hour), Algorithm: "baseline",
			Factor: 4, Floor: 50, Cap: 2000, LearnPeriod: policy.Duration(14 * 24 * time.Hour)},
	}}
	s := suggestFrom(t, cfg, `{"time":"2026-11-02T09:00:00Z","sasl_username":"alice","count":10,"every":"1m"}`+"\n", simulate.SuggestOptions{})
	text, err := s.TOML()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`auto_release = "drip"`, "factor = 4.0", "floor = 50.0", `learn_period = "14d"`} {
		if !strings.Contains(text, want) {
			t.Errorf("TOML lacks %s:\n%s", want, text)
		}
	}
	// With baseline the limit is the cap, and at least the floor.
	if l := s.Config.Limits[1]; l.Cap != 0 || l.Limit != 50 || strings.Contains(text, "cap =") {
		t.Errorf("baseline proposal: limit %v, cap %v; want limit 50 (the floor) and no cap:\n%s", l.Limit, l.Cap, text)
	}
}

// TestSuggestKeepsTheRatioForm: a ratio limit (an outcome limit over a
// share of the sender's recipients) is kept as configured, since Suggest
// proposes counts: its [[limit]] table keeps ratio and min_count and gets
// no limit, and the pasted tables decode to the proposed stack. Before,
// Suggest gave the ratio limit a count (which the engine refuses beside
// ratio) and its TOML dropped ratio and min_count.
func TestSuggestKeepsTheRatioForm(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour)},
		{Name: "unknown-ratio", Key: []string{"sasl_username"}, Per: "unknown_rcpt", Ratio: 0.1, MinCount: 50,
			Period: policy.Duration(time.Hour), Action: "freeze"},
	}}
	var b strings.Builder
	for i := range 60 {
		at := time.Date(2026, 11, 2, 9, i, 0, 0, time.UTC).Format(time.RFC3339)
		fmt.Fprintf(&b, `{"time":%q,"sasl_username":"alice","recipient":"r%d@example.net","queue_id":"Q%d"}`+"\n", at, i, i)
		if i%10 == 0 {
			fmt.Fprintf(&b, `{"time":%q,"sasl_username":"alice","recipient":"r%d@example.net","queue_id":"Q%d","outcome":"unknown_rcpt"}`+"\n", at, i, i)
		}
	}
	s := suggestFrom(t, cfg, b.String(), simulate.SuggestOptions{})
	if l := s.Config.Limits[1]; l.Ratio != 0.1 || l.MinCount != 50 || l.Limit != 0 {
		t.Errorf("ratio limit proposed as %+v; want ratio 0.1, min_count 50 and no limit", l)
	}
	text, err := s.TOML()
	if err != nil {
		t.Fatal(err)
	}
	var pasted struct{ Limit []policy.LimitConfig }
	if _, err := toml.Decode(text, &pasted); err != nil {
		t.Fatalf("%v:\n%s", err, text)
	}
	if !reflect.DeepEqual(pasted.Limit, s.Config.Limits) {
		t.Errorf("the TOML decodes to\n%+v\nnot the proposal\n%+v:\n%s", pasted.Limit, s.Config.Limits, text)
	}
	var out strings.Builder
	if err := s.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "ratio 0.1 of at least 50 recipients") {
		t.Errorf("the text does not say the ratio form is kept:\n%s", out.String())
	}
	if err := s.WritePlot(io.Discard, simulate.PlotSVG); err != nil {
		t.Errorf("plot: %v", err)
	}
}

// suggestFrom runs Suggest with cfg over trace (JSON Lines), with a memory
// store unless o has a NewStore.
func suggestFrom(t *testing.T, cfg policy.Config, trace string, o simulate.SuggestOptions) *simulate.Suggestion {
	t.Helper()
	tr, err := simulate.Read(strings.NewReader(trace), simulate.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	if o.NewStore == nil {
		o.NewStore = func() policy.Store { return ratestore.NewMemory(ratestore.MemoryOptions{}) }
	}
	s, err := simulate.Suggest(t.Context(), cfg, tr, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
