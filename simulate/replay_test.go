package simulate_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// stacked is a stack whose four limits answer one after the other for one
// sender: warn at 1, hold at 2, reject at 3 per hour (the reject limit
// written first, so it answers once it is over), plus a per-client limit
// that never fires.
func stacked(t *testing.T) *policy.Engine {
	t.Helper()
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "warn", Key: []string{"sender"}, Limit: 1, Period: policy.Duration(time.Hour), Action: "warn"},
		{Name: "reject", Key: []string{"sender_domain"}, Limit: 3, Period: policy.Duration(time.Hour), Action: "reject", Mode: "strict"},
		{Name: "hold", Key: []string{"sender"}, Limit: 2, Period: policy.Duration(time.Hour), Action: "hold", Mode: "strict"},
		{Name: "client", Key: []string{"client_address"}, Limit: 1000, Period: policy.Duration(24 * time.Hour)},
	}}
	e, err := policy.NewEngine(c, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

const stackedTrace = `{"time":"2026-11-20T18:00:00Z","sender":"dave@example.org","client_address":"192.0.2.9","count":5}
{"time":"2026-11-20T18:30:00Z","sender":"erin@example.net","client_address":"192.0.2.9"}
{"time":"2026-11-20T19:00:00Z","sasl_username":"nobody"}
`

func replayAll(t *testing.T, e *policy.Engine, trace string, fn func(*simulate.Result)) {
	t.Helper()
	tr := read(t, simulate.FormatJSONL, trace)
	err := simulate.Replay(context.Background(), e, tr.Events(), func(r *simulate.Result) error {
		fn(r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSummaryCountsEveryAction(t *testing.T) {
	e := stacked(t)
	sum := simulate.NewSummarizer(e.Limits(), simulate.Filter{})
	var actions []string
	replayAll(t, e, stackedTrace, func(r *simulate.Result) {
		sum.Add(r)
		actions = append(actions, r.Decision.Action.String())
	})
	if got := strings.Join(actions, " "); got != "pass warn hold reject reject pass pass" {
		t.Fatalf("actions %s", got)
	}
	s := sum.Summary()
	if s.Requests != 7 || !s.Start.Equal(t0) || !s.End.Equal(t0.Add(time.Hour)) {
		t.Fatalf("summary %+v", s)
	}
	var keys []string
	for _, k := range s.Keys {
		keys = append(keys, k.Key)
	}
	// Refused keys first, by first refusal; then by requests (the client made
	// six). The bounce (null sender) is its own key, "<>", not unmeasured:
	// MAIL FROM:<> does not dodge a limit keyed by sender.
	if got := strings.Join(keys, ","); got != "192.0.2.9,dave@example.org,example.org,<>,erin@example.net,example.net" {
		t.Fatalf("keys %s", got)
	}
	d := summaryOf(s, "DAVE@example.org")
	if d.Requests != 5 || d.Admitted != 2 || d.Warned != 1 || d.Held != 1 || d.Rejected != 2 || d.Deferred != 0 ||
		d.Refused() != 3 || d.RefusedBy != "hold" || d.RefusedAfter != 0 {
		t.Errorf("dave %+v", d)
	}
	// The leaky warn limit stores only admitted requests (pass, warn,
	// hold): its highest measured rate is the first rejected attempt on
	// top of those three.
	if p := d.Peaks[0]; !p.Measured || p.Limit != "warn" || p.Rate < 3.99 || p.Rate > 4.01 || p.Max != 1 {
		t.Errorf("dave warn peak %+v", p)
	}
	if d.Peaks[1].Measured || d.Peaks[3].Measured {
		t.Errorf("dave is not a domain or a client: %+v", d.Peaks)
	}
	if c := summaryOf(s, "192.0.2.9"); c.Requests != 6 || c.Refused() != 3 {
		t.Errorf("client %+v", c)
	}
	if n := summaryOf(s, "<>"); n == nil || n.Requests != 1 || n.Admitted != 1 {
		t.Errorf("null sender %+v", n)
	}

	var tbl, cs, js bytes.Buffer
	if err := s.Write(&tbl, simulate.OutputTable); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tbl.String(), "7 requests from 2026-11-20T18:00:00Z to 2026-11-20T19:00:00Z (1:00:00 h), 6 keys, 3 refused") {
		t.Errorf("table:\n%s", tbl.String())
	}
	s.Write(&cs, simulate.OutputCSV)
	rows, err := csv.NewReader(&cs).ReadAll()
	if err != nil || len(rows) != 7 || rows[2][0] != "dave@example.org" || rows[2][12] != "hold" {
		t.Errorf("csv %v %v", rows, err)
	}
	s.Write(&js, simulate.OutputJSONL)
	var first map[string]any
	if err := json.Unmarshal(bytes.Split(js.Bytes(), []byte("\n"))[1], &first); err != nil ||
		first["refused_by"] != "hold" || first["held"] != 1.0 {
		t.Errorf("jsonl %v %v", first, err)
	}
	if err := s.Write(&js, "yaml"); !errors.Is(err, simulate.ErrFormat) {
		t.Errorf("yaml: %v", err)
	}

	// Filtered to one key, the unmeasured bucket goes.
	f := simulate.NewSummarizer(e.Limits(), simulate.Filter{Keys: []string{"erin@example.net"}})
	replayAll(t, stacked(t), stackedTrace, f.Add)
	if ks := f.Summary().Keys; len(ks) != 1 || ks[0].Key != "erin@example.net" {
		t.Errorf("filtered: %+v", ks)
	}
}

func TestDecisionWriters(t *testing.T) {
	e := stacked(t)
	for _, format := range []string{simulate.OutputTable, simulate.OutputCSV, simulate.OutputJSONL} {
		var buf bytes.Buffer
		w, err := simulate.NewWriter(&buf, format, e.Limits(), t0)
		if err != nil {
			t.Fatal(err)
		}
		f := simulate.Filter{RefusedOnly: true}
		replayAll(t, stacked(t), stackedTrace, func(r *simulate.Result) {
			if f.Match(r) {
				if err := w.Write(r); err != nil {
					t.Fatal(err)
				}
			}
		})
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		out := buf.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		want := 4 // header + 3 refused
		if format == simulate.OutputJSONL {
			want = 3
		}
		if len(lines) != want {
			t.Errorf("%s: %d lines:\n%s", format, len(lines), out)
			continue
		}
		switch format {
		case simulate.OutputTable:
			// The sender_domain limit's key differs from the KEY column.
			if !strings.Contains(lines[1], "dave@example.org") || !strings.Contains(lines[1], "example.org: 2.00→3.00 ≤ 3") ||
				!strings.Contains(lines[1], "hold") || !strings.Contains(lines[1], "+0:00:00") {
				t.Errorf("table row %q", lines[1])
			}
		case simulate.OutputCSV:
			rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
			if err != nil || len(rows[0]) != 11+4*6 || rows[3][5] != "reject" || rows[3][9] != "550" {
				t.Errorf("csv %v %v", rows, err)
			}
		case simulate.OutputJSONL:
			var d simulate.DecisionRecord
			if err := json.Unmarshal([]byte(lines[2]), &d); err != nil || d.Action != "reject" || d.Code != 550 ||
				len(d.Measures) != 4 || d.Measures[1].Key != "example.org" || !d.Measures[1].Over {
				t.Errorf("jsonl %+v %v", d, err)
			}
		}
	}
	if _, err := simulate.NewWriter(&bytes.Buffer{}, "xml", nil, t0); !errors.Is(err, simulate.ErrFormat) {
		t.Errorf("xml: %v", err)
	}
}

type countingEvaluator struct{ n int }

func (c *countingEvaluator) Evaluate(context.Context, time.Time, *policy.Request) policy.Decision {
	c.n++
	return policy.Decision{}
}

func TestReplayStops(t *testing.T) {
	tr := read(t, simulate.FormatJSONL, `{"time":1795197600,"count":10000}`)
	ev := &countingEvaluator{}
	stop := errors.New("stop")
	err := simulate.Replay(context.Background(), ev, tr.Events(), func(r *simulate.Result) error {
		if r.Seq == 3 {
			return stop
		}
		return nil
	})
	if err != stop || ev.n != 3 {
		t.Fatalf("%v after %d", err, ev.n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ev.n = 0
	if err := simulate.Replay(ctx, ev, tr.Events(), func(*simulate.Result) error { return nil }); !errors.Is(err, context.Canceled) || ev.n >= 10000 {
		t.Fatalf("cancelled: %v after %d", err, ev.n)
	}
}

func TestPlotFormats(t *testing.T) {
	e := stacked(t)
	rec := simulate.NewRecorder(e.Limits(), simulate.Filter{})
	replayAll(t, e, stackedTrace, rec.Add)
	for _, format := range []string{simulate.PlotSVG, simulate.PlotPNG} {
		var buf bytes.Buffer
		if err := rec.WriteTo(&buf, format, simulate.PlotOptions{Title: "stacked"}); err != nil {
			t.Fatal(err)
		}
		if buf.Len() < 1000 {
			t.Errorf("%s: %d bytes", format, buf.Len())
		}
	}
	if err := rec.WriteTo(&bytes.Buffer{}, "gif", simulate.PlotOptions{}); !errors.Is(err, simulate.ErrFormat) {
		t.Errorf("gif: %v", err)
	}
	// A trace at a single instant, and a key that is not in the trace.
	e = stacked(t)
	rec = simulate.NewRecorder(e.Limits(), simulate.Filter{})
	replayAll(t, e, `{"time":1795197600,"sender":"a@b.example","count":3}`, rec.Add)
	var buf bytes.Buffer
	if err := rec.WriteTo(&buf, simulate.PlotSVG, simulate.PlotOptions{Keys: []string{"nobody"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "no requests measured") && !strings.Contains(buf.String(), "0:00") {
		t.Errorf("single-instant plot lacks minute ticks")
	}
}

// summaryOf returns the summary of key (compared case-insensitively), or nil.
func summaryOf(s *simulate.Summary, key string) *simulate.KeySummary {
	for i := range s.Keys {
		if strings.EqualFold(s.Keys[i].Key, key) {
			return &s.Keys[i]
		}
	}
	return nil
}

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

// TestReplayCountsRecipientsForTheRatioForm: the replay counts each
// admitted message's recipients, as the daemon does when it joins the
// queue ID, so a ratio limit (more than 10% of at least 50 recipients an
// hour unknown) refuses a sender with 30% unknown recipients once the
// recipients' rate reached 50 (after about 65 at 120 an hour), and never
// one with 2%.
func TestReplayCountsRecipientsForTheRatioForm(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{{Name: "unknown-ratio", Key: []string{"sasl_username"}, Per: "unknown_rcpt",
		Ratio: 0.10, MinCount: 50, Period: policy.Duration(time.Hour), Action: "freeze"}}}
	start := time.Date(2026, 11, 20, 18, 0, 0, 0, time.UTC)
	var b strings.Builder
	for i := range 100 {
		for _, s := range []struct {
			user string
			bad  bool
		}{{"mallory", i%10 < 3}, {"newsletter", i == 20 || i == 70}} {
			at := start.Add(time.Duration(i) * 30 * time.Second)
			inst := s.user + "-" + strconv.Itoa(i)
			b.WriteString(`{"time":"` + at.Format(time.RFC3339) + `","sasl_username":"` + s.user + `","instance":"` + inst + `"}` + "\n")
			if s.bad {
				b.WriteString(`{"time":"` + at.Add(10*time.Second).Format(time.RFC3339) + `","sasl_username":"` + s.user +
					`","instance":"` + inst + `","recipient":"x` + strconv.Itoa(i) + `@example.net","outcome":"unknown_rcpt"}` + "\n")
			}
		}
	}
	for round := range 3 {
		e, err := policy.NewEngine(c, ratestore.NewMemory(ratestore.MemoryOptions{}))
		if err != nil {
			t.Fatal(err)
		}
		first := map[string]int{} // each user's first refused message, by number
		sent := map[string]int{}
		replayAll(t, e, b.String(), func(r *simulate.Result) {
			if r.Decision.Fault != nil {
				t.Fatalf("fault: %v", r.Decision.Fault)
			}
			if r.Outcome != 0 {
				return
			}
			u := r.Request.SASLUsername
			sent[u]++
			if r.Refused() && first[u] == 0 {
				first[u] = sent[u]
				if r.Decision.Limit != "unknown-ratio" || !strings.Contains(r.Decision.Outcome, "unknown users") {
					t.Fatalf("round %d: %s refused by %q: %s", round, u, r.Decision.Limit, r.Decision.Outcome)
				}
			}
		})
		if at := first["mallory"]; at <= 50 || at > 80 {
			t.Fatalf("round %d: mallory first refused at message %d, want after her 50th recipient and by her 80th", round, at)
		}
		if at := first["newsletter"]; at != 0 {
			t.Fatalf("round %d: newsletter refused at message %d, want never", round, at)
		}
	}
}
