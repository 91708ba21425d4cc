package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/simulate"
)

const tracesDir = "../../testdata/traces"

func trace(name string) string { return filepath.Join(tracesDir, name) }

// runCmd runs the root command with args and returns its standard output.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	err := cmd.Execute()
	return out.String(), err
}

func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCmd(t, args...)
	if err != nil {
		t.Fatalf("ratelimitd %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// keySummary is one line of `simulate --summary --format jsonl`.
type keySummary struct {
	simulate.KeySummary
	RefusedAfterS float64 `json:"refused_after_s"`
}

func (k keySummary) refused() int { return k.Refused() }

func summaries(t *testing.T, args ...string) map[string]keySummary {
	t.Helper()
	out := mustRun(t, append([]string{"simulate", "--summary", "--format", "jsonl"}, args...)...)
	m := map[string]keySummary{}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var k keySummary
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("summary line %d %q: %v", i+1, line, err)
		}
		m[k.Key] = k
	}
	return m
}

// The seed-002 scenario through the command: the default configuration
// stops a compromised account sending 150/hour all weekend with the strict
// daily limit after 7h48m, having admitted 1,171 messages (the engine test
// TestWeekendSpamStoppedByDailyLimit measures the same figures).
func TestSimulateCompromisedWeekend(t *testing.T) {
	sum := summaries(t, trace("compromised-weekend.jsonl"))
	m, ok := sum["mallory"]
	if !ok {
		t.Fatalf("no summary for mallory: %+v", sum)
	}
	if m.Requests != 9000 {
		t.Errorf("mallory made %d requests, want 9000", m.Requests)
	}
	if m.RefusedBy != "daily" {
		t.Errorf("mallory first refused by %q, want daily", m.RefusedBy)
	}
	after := time.Duration(m.RefusedAfterS * float64(time.Second))
	if after <= 0 || after > 8*time.Hour {
		t.Errorf("mallory first refused after %v, want within 8h", after)
	}
	if want := 7*time.Hour + 48*time.Minute + 24*time.Second; after != want {
		t.Errorf("mallory first refused after %v, want %v (message 1,172 at 24 s spacing)", after, want)
	}
	if m.Admitted != 1171 || m.Deferred != 9000-1171 {
		t.Errorf("mallory: %d admitted, %d deferred; want 1171 and %d", m.Admitted, m.Deferred, 9000-1171)
	}
	for _, u := range []string{"alice", "bob"} {
		if k := sum[u]; k.Requests == 0 || k.refused() != 0 {
			t.Errorf("%s: %+v, want some mail and none refused", u, k)
		}
	}

	// The same figures in the table operators read.
	table := mustRun(t, "simulate", "-s", trace("compromised-weekend.jsonl"))
	var row string
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "mallory ") {
			row = l
		}
	}
	f := strings.Fields(row)
	if len(f) < 12 || f[1] != "9000" || f[2] != "1171" || f[3] != "7829" || f[9] != "+7:48:24" || f[10] != "daily" {
		t.Errorf("table row for mallory: %q\n%s", row, table)
	}
}

// predictLeaky applies DESIGN.md's formula to n requests of cost 1, spaced
// every apart from an empty state, under a leaky limit (refused requests are
// not stored). It returns the 1-based index of the first refused request
// and how many were admitted.
func predictLeaky(n int, every, period time.Duration, limit float64) (firstRefused, admitted int) {
	var rate, tPrev float64
	have := false
	for i := 0; i < n; i++ {
		now := float64(i) * every.Seconds() / period.Seconds()
		r := 1.0 // first request: the interval since "never" is huge, r = max(~0, cost)
		if have {
			interval := math.Max(now-tPrev, 1e-10)
			alpha := math.Exp(-interval)
			r = math.Max((1-alpha)/interval+alpha*rate, 1)
		}
		if r > limit {
			if firstRefused == 0 {
				firstRefused = i + 1
			}
			continue
		}
		rate, tPrev, have = r, now, true
		admitted++
	}
	return firstRefused, admitted
}

// newsletter.jsonl: 400 messages 1.5 s apart. The hourly limit (200,
// leaky) defers it once the decayed sum of its messages passes 200, a little
// after message 200 because the earlier ones have decayed; the daily limit
// (1000) is never reached.
func TestSimulateNewsletter(t *testing.T) {
	first, admitted := predictLeaky(400, 1500*time.Millisecond, time.Hour, 200)
	if first <= 200 || first > 215 {
		t.Fatalf("model: first refusal at message %d", first)
	}
	sum := summaries(t, trace("newsletter.jsonl"))
	n := sum["newsletter"]
	if n.Requests != 400 || n.RefusedBy != "hourly" {
		t.Fatalf("newsletter: %+v", n)
	}
	wantAt := n.First.Add(time.Duration(first-1) * 1500 * time.Millisecond)
	if !n.FirstRefused.Equal(wantAt) {
		t.Errorf("newsletter first refused at %v (message %.0f), the maths says message %d at %v",
			n.FirstRefused, n.RefusedAfterS/1.5+1, first, wantAt)
	}
	if n.Admitted != admitted || n.Deferred != 400-admitted {
		t.Errorf("newsletter: %d admitted, %d deferred; the maths says %d admitted", n.Admitted, n.Deferred, admitted)
	}
	t.Logf("newsletter: first deferred at message %d, %d of 400 admitted", first, admitted)
	users := 0
	for k, s := range sum {
		if k == "newsletter" {
			continue
		}
		users++
		if s.refused() != 0 {
			t.Errorf("ordinary user %s was refused: %+v", k, s)
		}
	}
	if users != 12 {
		t.Errorf("%d ordinary users, want 12", users)
	}
}

// A burst at one instant (count without every): exactly 200 pass, the rest
// are deferred by "hourly", as in the engine's TestHourlyBurstThenDefer.
func TestSimulateBurstAtOneInstant(t *testing.T) {
	path := filepath.Join(t.TempDir(), "burst.jsonl")
	writeFile(t, path, `{"time":1795197600,"sasl_username":"bulk","count":400}`+"\n")
	k := summaries(t, path)["bulk"]
	if k.Admitted != 200 || k.Deferred != 200 || k.RefusedBy != "hourly" || k.RefusedAfterS != 0 {
		t.Fatalf("burst of 400: %+v", k)
	}
}

func TestSimulateRelayNeverRefused(t *testing.T) {
	out := mustRun(t, "simulate", "-c", trace("relay.toml"), "--summary", "--format", "csv", trace("busy-relay.csv"))
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 {
		t.Fatalf("want a header and 3 relays:\n%s", out)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	total := 0
	for _, r := range rows[1:] {
		req, _ := strconv.Atoi(r[col["requests"]])
		adm, _ := strconv.Atoi(r[col["admitted"]])
		total += req
		if req == 0 || adm != req || r[col["first_refused"]] != "" {
			t.Errorf("relay %s: %v", r[col["key"]], r)
		}
		peak, _ := strconv.ParseFloat(r[col["relay-hourly_peak"]], 64)
		if peak > 300 {
			t.Errorf("relay %s hourly peak %v over 300", r[col["key"]], peak)
		}
	}
	if rows[1][col["key"]] != "192.0.2.25" || total != 8640+2880+40+576 {
		t.Errorf("first row %v, %d requests", rows[1], total)
	}
	// Under the default configuration (keyed by sasl_username) nothing in
	// this trace is measured at all.
	def := summaries(t, trace("busy-relay.csv"))
	if len(def) != 1 || def["(not measured)"].Requests != total {
		t.Errorf("default config on the relay trace: %+v", def)
	}
}

func TestSimulateDecisionFormatsParse(t *testing.T) {
	csvOut := mustRun(t, "simulate", "--format", "csv", "--key", "newsletter", "--key", "Carol", trace("newsletter.jsonl"))
	rows, err := csv.NewReader(strings.NewReader(csvOut)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+400+11 { // the newsletter and carol
		t.Fatalf("csv: %d rows, want %d", len(rows), 1+400+11)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for _, h := range []string{"seq", "time", "action", "limit", "retry_after_s", "hourly_before", "hourly_after", "hourly_max", "daily_over"} {
		if _, ok := col[h]; !ok {
			t.Errorf("csv header lacks %q: %v", h, rows[0])
		}
	}
	defers := 0
	for _, r := range rows[1:] {
		if _, err := time.Parse(time.RFC3339Nano, r[col["time"]]); err != nil {
			t.Errorf("csv time: %v", err)
		}
		if _, err := strconv.ParseFloat(r[col["hourly_after"]], 64); err != nil {
			t.Errorf("csv rate: %v", err)
		}
		if r[col["action"]] == "defer" {
			defers++
			if r[col["limit"]] != "hourly" || r[col["hourly_over"]] != "true" {
				t.Errorf("csv defer row %v", r)
			}
		}
	}
	if defers == 0 {
		t.Error("csv: no deferral")
	}

	jsonOut := mustRun(t, "simulate", "--format", "jsonl", trace("newsletter.jsonl"))
	lines := strings.Split(strings.TrimSpace(jsonOut), "\n")
	if len(lines) != 523 {
		t.Fatalf("jsonl: %d lines, want 523", len(lines))
	}
	prev := time.Time{}
	for i, l := range lines {
		var d struct {
			Seq      int       `json:"seq"`
			Time     time.Time `json:"time"`
			Action   string    `json:"action"`
			Measures []struct {
				Limit  string  `json:"limit"`
				Before float64 `json:"before"`
				After  float64 `json:"after"`
				Max    float64 `json:"max"`
			} `json:"measures"`
		}
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatalf("jsonl line %d: %v", i+1, err)
		}
		if d.Seq != i+1 || d.Time.Before(prev) || len(d.Measures) != 2 || d.Measures[1].Max != 1000 {
			t.Fatalf("jsonl line %d: %+v", i+1, d)
		}
		prev = d.Time
	}

	table := mustRun(t, "simulate", "--refused", "--key", "newsletter", trace("newsletter.jsonl"))
	tl := strings.Split(strings.TrimSpace(table), "\n")
	if len(tl) != 1+176 || !strings.Contains(tl[1], "> 200") || !strings.Contains(tl[1], "defer") {
		t.Errorf("--refused table: %d lines, first %q", len(tl), tl[min(1, len(tl)-1)])
	}
}

func TestSimulatePlot(t *testing.T) {
	dir := t.TempDir()
	svgPath, pngPath := filepath.Join(dir, "weekend.svg"), filepath.Join(dir, "weekend.png")
	mustRun(t, "simulate", "-s", "--plot", svgPath, trace("compromised-weekend.jsonl"))
	mustRun(t, "simulate", "-s", "--plot", pngPath, "--key", "mallory", trace("compromised-weekend.jsonl"))

	b, err := os.ReadFile(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("not a PNG: % x", b[:min(8, len(b))])
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if r := img.Bounds(); r.Dx() < 800 || r.Dy() < 600 {
		t.Errorf("PNG is %v", r)
	}

	f, err := os.Open(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	root, texts := "", ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
		case xml.CharData:
			texts += string(tok)
		}
	}
	for _, want := range []string{"hours since Fri 2026-11-20 18:00:00 UTC", "rate (mail per 24h)", "limit 1000 per 24h", "mallory (7829 refused)", "refused request"} {
		if !strings.Contains(texts, want) {
			t.Errorf("SVG text lacks %q", want)
		}
	}
	if root != "svg" {
		t.Errorf("SVG root element %q", root)
	}

	if _, err := runCmd(t, "simulate", "--plot", filepath.Join(dir, "x.gif"), trace("newsletter.jsonl")); err == nil ||
		!strings.Contains(err.Error(), ".svg or .png") {
		t.Errorf("--plot x.gif: %v", err)
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSimulateErrorsNameTheLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want string }{
		{"broken.jsonl", "# comment\n{\"time\":\"2026-11-20T18:00:00Z\",\"sasl_username\":\"a\"}\n{\"time\": \"2026-11-20T18:00:01Z\", sasl_username\n",
			"broken.jsonl: line 3: not a JSON object"},
		{"typo.jsonl", "\n\n{\"time\":1795197600,\"sasl_user\":\"a\"}\n", `typo.jsonl: line 3: unknown field "sasl_user"`},
		{"badtime.csv", "time,sasl_username\n2026-11-20T18:00:00Z,a\nfriday,b\n", `badtime.csv: line 3: field "time": "friday" is neither RFC 3339`},
		{"short.csv", "time,sasl_username\n# comment\n2026-11-20T18:00:00Z\n", "short.csv: line 3: 1 fields, but the header has 2"},
		{"every.jsonl", `{"time":1795197600,"sasl_username":"a","every":"24s"}` + "\n", `every.jsonl: line 1: "every" needs "count" or "until"`},
	} {
		path := filepath.Join(dir, tc.name)
		writeFile(t, path, tc.content)
		_, err := runCmd(t, "simulate", path)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	path := filepath.Join(dir, "trace.txt")
	writeFile(t, path, `{"time":1795197600,"sasl_username":"a"}`+"\n")
	if out, err := runCmd(t, "simulate", path); err != nil || !strings.Contains(out, "pass") {
		t.Errorf("a JSON Lines trace named .txt is read by its content: %v %q", err, out)
	}
	if out := mustRun(t, "simulate", "--input-format", "jsonl", path); !strings.Contains(out, "pass") {
		t.Errorf("--input-format jsonl: %q", out)
	}
	if _, err := runCmd(t, "simulate", "--format", "xml", path); err == nil {
		t.Error("--format xml accepted")
	}
}

func TestSimulateHelp(t *testing.T) {
	out := mustRun(t, "simulate", "--help")
	for _, want := range []string{"TRACE FORMAT", "every", "until", "--summary", "--plot", "Examples:", "compromised-weekend.jsonl"} {
		if !strings.Contains(out, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// testdata/traces/unique-baseline.toml through simulate: five weeks of an
// ordinary user's mornings, then on day 35 a newsletter to the same 80
// readers every 30 minutes, the ordinary user compromised (100 messages
// an hour to new addresses), and a spammer writing 5 messages an hour to
// 40 new recipients each. The newsletter is never refused; the baseline
// limit stops the compromised user within half an hour of the first
// spam and the unique-recipient limit stops the spammer.
func TestSimulateUniqueAndBaseline(t *testing.T) {
	var b strings.Builder
	start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	line := func(at time.Time, format string, a ...any) {
		fmt.Fprintf(&b, `{"time":%d,`+format+"}\n", append([]any{at.Unix()}, a...)...)
	}
	for d := range 35 {
		for i := range 6 {
			line(start.Add(time.Duration(d)*24*time.Hour+9*time.Hour+time.Duration(i)*2*time.Minute),
				`"sasl_username":"carol","recipient":"friend%d@example.net"`, d*6+i)
		}
	}
	day35 := start.Add(35 * 24 * time.Hour)
	for round := range 9 {
		for i := range 80 {
			line(day35.Add(8*time.Hour+time.Duration(round)*30*time.Minute+time.Duration(i)*time.Second),
				`"sasl_username":"news","recipient":"reader%d@example.org"`, i)
		}
	}
	compromise := day35.Add(9 * time.Hour)
	for i := range 300 {
		line(compromise.Add(time.Duration(i)*36*time.Second), `"sasl_username":"carol","recipient":"victim%d@example.com"`, i)
	}
	for m := range 10 {
		at := day35.Add(10*time.Hour + time.Duration(m)*12*time.Minute)
		inst := fmt.Sprintf("mal%d", m)
		for r := range 40 {
			line(at, `"protocol_state":"RCPT","instance":"%s","sasl_username":"mallory","recipient":"target%d@example.com"`, inst, m*40+r)
		}
		line(at, `"instance":"%s","sasl_username":"mallory","recipient_count":40`, inst)
	}
	path := filepath.Join(t.TempDir(), "unique-baseline.jsonl")
	writeFile(t, path, b.String())
	sum := summaries(t, "-c", trace("unique-baseline.toml"), path)

	if n := sum["news"]; n.Requests != 720 || n.refused() != 0 {
		t.Errorf("newsletter: %+v, want 720 messages, none refused", n)
	}
	c := sum["carol"]
	after := c.FirstRefused.Sub(compromise)
	if c.RefusedBy != "usual" || after < 0 || after > 30*time.Minute {
		t.Errorf("carol: first refused by %q %v after the compromise, want by usual within 30m: %+v", c.RefusedBy, after, c)
	}
	m := sum["mallory"]
	if m.RefusedBy != "new-recipients" || m.FirstRefused.Sub(day35.Add(10*time.Hour)) > time.Hour {
		t.Errorf("mallory: %+v, want refused by new-recipients within the hour", m)
	}
	t.Logf("carol refused %v after the compromise (%d of %d admitted); mallory refused at %v, %d of %d recipients admitted",
		after, c.Admitted, c.Requests, m.FirstRefused.Format(time.TimeOnly), m.Admitted, m.Requests)
}
