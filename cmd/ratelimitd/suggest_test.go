package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// month is the synthetic month of TestSuggestSyntheticMonth.
var (
	monthStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) // a Sunday
	// The compromised account starts spamming on day 20 at 02:00.
	compromiseStart = time.Date(2026, 11, 20, 2, 0, 0, 0, time.UTC)
	compromiseEnd   = compromiseStart.Add(48 * time.Hour)
)

// syntheticMonth writes a month of submission traffic as a trace, in the
// form "trace from-maillog" writes (RCPT per recipient, then
// END-OF-MESSAGE): 40 ordinary users (u01..u40, and dave) sending 2 to 12
// messages of 1 to 3 recipients on workdays between 08:00 and 18:00,
// sometimes 5 in a few minutes; "news", a newsletter to about 300
// subscribers every Monday at 09:00 (one message every 2 s, a few
// subscribers changing each week); and dave, whose account is compromised
// on day 20 at 02:00 and sends 150 messages an hour to new addresses for
// two days.
func syntheticMonth(t *testing.T, path string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(20261101, 12))
	var msgs []maillog.Message
	n := 0
	add := func(user string, at time.Time, rcpts ...string) {
		n++
		msgs = append(msgs, maillog.Message{Host: "mx", QueueID: fmt.Sprintf("Q%07X", n), Received: at, Queued: at.Add(time.Second),
			ClientAddress: "192.0.2.10", SASLMethod: "PLAIN", SASLUsername: user, Sender: user + "@example.org",
			Size: int64(2000 + rng.IntN(50000)), Recipients: rcpts})
	}
	users := []string{"dave"}
	for i := 1; i <= 40; i++ {
		users = append(users, fmt.Sprintf("u%02d", i))
	}
	for day := 0; day < 30; day++ {
		d := monthStart.AddDate(0, 0, day)
		if wd := d.Weekday(); wd == time.Saturday || wd == time.Sunday {
			continue
		}
		for _, u := range users {
			k := 2 + rng.IntN(11)
			for j := 0; j < k; j++ {
				at := d.Add(8*time.Hour + time.Duration(rng.Int64N(int64(10*time.Hour))))
				burst := 1
				if rng.IntN(20) == 0 {
					burst = 5
				}
				for b := 0; b < burst; b++ {
					var rc []string
					for r := 0; r < 1+rng.IntN(3); r++ {
						rc = append(rc, fmt.Sprintf("contact%d.%s@example.net", rng.IntN(40), u))
					}
					add(u, at.Add(time.Duration(b)*90*time.Second), rc...)
				}
			}
		}
		if d.Weekday() == time.Monday {
			week := day / 7
			at := d.Add(9 * time.Hour)
			for s := 0; s < 300; s++ {
				sub := s
				if s < 10 {
					sub = 1000 + 10*week + s // a few subscribers change each week
				}
				add("news", at.Add(time.Duration(s)*2*time.Second), fmt.Sprintf("subscriber%d@example.com", sub))
			}
		}
	}
	for at, i := compromiseStart, 0; at.Before(compromiseEnd); at, i = at.Add(24*time.Second), i+1 {
		add("dave", at, fmt.Sprintf("victim%d@example.%d.test", i, i%97))
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "# synthetic month: 40 users, a weekly newsletter, dave compromised on day 20")
	enc := json.NewEncoder(f)
	for _, e := range maillog.Trace(msgs).Entries {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSuggestSyntheticMonth runs "suggest" with its defaults on the
// synthetic month: the proposal refuses the compromised account within an
// hour of the compromise and never before it, never refuses the
// newsletter or the other users, gives the newsletter overrides as a
// recurring bulk sender, names dave as an outlier, and its [[limit]]
// tables pass "config check". Set RATELIMITD_KEEP_MONTH=FILE to keep the
// trace (the example in docs/tuning.md).
func TestSuggestSyntheticMonth(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "month.jsonl")
	if keep := os.Getenv("RATELIMITD_KEEP_MONTH"); keep != "" {
		trace = keep
	}
	syntheticMonth(t, trace)
	tomlPath := filepath.Join(dir, "limits.toml")
	plot := filepath.Join(dir, "peaks.svg")
	out, err := cli(t, "suggest", "--toml", tomlPath, "--plot", plot, trace)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Logf("suggest output:\n%s", out)

	// The same proposal through the API, to check the refusals exactly.
	tr, err := simulate.ReadFile(trace, "")
	if err != nil {
		t.Fatal(err)
	}
	f := loadDefault(t)
	s, err := simulate.Suggest(t.Context(), f, tr, simulate.SuggestOptions{NewStore: newMemStore})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Refusals) != 1 || s.Refusals[0].Key != "dave" {
		t.Fatalf("refused %+v; want dave only", s.Refusals)
	}
	rf := s.Refusals[0]
	if rf.Messages < 7200 || rf.Refused > rf.Messages || rf.Refused < 7000 {
		t.Fatalf("dave: %d of %d messages refused; he sent 7200 spam messages and more", rf.Refused, rf.Messages)
	}
	if rf.First.Before(compromiseStart) || rf.First.Sub(compromiseStart) > time.Hour {
		t.Fatalf("dave first refused at %v; want within an hour after %v", rf.First, compromiseStart)
	}
	if rf.Last.Before(compromiseEnd.Add(-time.Hour)) {
		t.Fatalf("dave last refused at %v; the spam ran until %v", rf.Last, compromiseEnd)
	}
	for _, lp := range s.Limits {
		if len(lp.Overrides) != 1 || lp.Overrides[0].Key != "news" || lp.Overrides[0].Bulk == nil || lp.Overrides[0].Bulk.Sends < 4 {
			t.Fatalf("limit %s overrides %+v; want news as a recurring bulk sender", lp.Config.Name, lp.Overrides)
		}
		if len(lp.Outliers) != 1 || lp.Outliers[0].Key != "dave" {
			t.Fatalf("limit %s outliers %+v; want dave", lp.Config.Name, lp.Outliers)
		}
		if lp.Proposed >= 100 || lp.Proposed <= lp.Median {
			t.Fatalf("limit %s proposed %v (median %v)", lp.Config.Name, lp.Proposed, lp.Median)
		}
	}
	for _, want := range []string{"override (confirm): news = ", "weekly on Mondays at 09:00 UTC", "outlier: dave peaked at",
		"--allow dave", "[[limit]]", "nobody", "dave"} {
		if want == "nobody" {
			if strings.Contains(out, "nobody would have been refused") {
				t.Errorf("output claims nobody was refused")
			}
			continue
		}
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?m)^  dave\s+hourly`).MatchString(out) {
		t.Errorf("the refusal table does not show dave refused by hourly")
	}
	// The TOML block is a valid configuration with these limits.
	chk, err := cli(t, "config", "check", tomlPath)
	if err != nil || !strings.Contains(chk, "hourly") || !strings.Contains(chk, "daily") {
		t.Fatalf("config check of the proposal: %v\n%s", err, chk)
	}
	if svg, err := os.ReadFile(plot); err != nil || !strings.Contains(string(svg), "<svg") || !strings.Contains(string(svg), "proposed limit") {
		t.Fatalf("plot: %v", err)
	}
	// With dave allowed, he gets an override and nobody is refused.
	out, err = cli(t, "suggest", "--allow", "dave", trace)
	if err != nil || !strings.Contains(out, "nobody would have been refused") || !strings.Contains(out, "override (confirm): dave = ") {
		t.Fatalf("--allow dave: %v\n%s", err, out)
	}
}

func loadDefault(t *testing.T) policy.Config {
	t.Helper()
	f, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	return f.PolicyConfig()
}

func newMemStore() policy.Store { return ratestore.NewMemory(ratestore.MemoryOptions{}) }

// TestSuggestMaillog runs suggest straight from mail logs: the log summary,
// a warning that a few minutes of mail are too little to go on, and
// errors for a missing input or both inputs.
func TestSuggestMaillog(t *testing.T) {
	out, err := cli(t, "suggest", "--tz", "UTC", "--log-end", "2027-01-02T00:00:00Z",
		"--maillog", "../../testdata/maillog/postfix-classic.log")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"5 messages (7 recipients) from 4 senders", "Note: the trace covers only", `limit "hourly"`, "[[limit]]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := cli(t, "suggest"); err == nil {
		t.Error("suggest without input succeeded")
	}
	if _, err := cli(t, "suggest", "--maillog", "../../testdata/maillog/exim-mainlog", "x.jsonl"); err == nil {
		t.Error("suggest with a trace and --maillog succeeded")
	}
	if _, err := cli(t, "suggest", "--headroom", "0.5", "../../testdata/traces/newsletter.jsonl"); err == nil || !strings.Contains(err.Error(), "headroom") {
		t.Errorf("--headroom 0.5: %v", err)
	}
}

// outcomeMonthStart is when the synthetic log of writeOutcomeMonth begins;
// the spam run starts on day 12 at 03:00.
var (
	outcomeMonthStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	spamStart         = time.Date(2026, 11, 12, 3, 0, 0, 0, time.UTC)
)

// writeOutcomeMonth writes 30 days of a Postfix mail log (RFC 3339 stamps,
// smtpd, cleanup, qmgr and smtp lines as Postfix writes them): 30 users
// (u01..u30) sending 8 one-recipient messages a day between 08:00 and
// 18:00, and "sales" 60 an hour from 09:00 to 17:00 on workdays, of whose recipients
// 1% bounce as unknown (dsn=5.1.1) and 0.5% are deferred once before
// delivery; and "mallory", whose account sends 150 messages an hour for 30
// hours from spamStart, 30% to unknown recipients.
func writeOutcomeMonth(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	rng := rand.New(rand.NewPCG(37, 2))
	type msg struct {
		at       time.Time
		user     string
		bad, def bool
	}
	var msgs []msg
	add := func(at time.Time, user string, badShare float64) {
		msgs = append(msgs, msg{at: at, user: user, bad: rng.Float64() < badShare, def: rng.Float64() < 0.005})
	}
	for day := 0; day < 30; day++ {
		d := outcomeMonthStart.AddDate(0, 0, day)
		for i := 1; i <= 30; i++ {
			for j := 0; j < 8; j++ {
				add(d.Add(8*time.Hour+time.Duration(rng.Int64N(int64(10*time.Hour)))), fmt.Sprintf("u%02d", i), 0.01)
			}
		}
		for j := 0; j < 8*60 && d.Weekday() != time.Saturday && d.Weekday() != time.Sunday; j++ {
			add(d.Add(9*time.Hour+time.Duration(j)*time.Minute+time.Duration(rng.IntN(50))*time.Second), "sales", 0.01)
		}
	}
	for at := spamStart; at.Before(spamStart.Add(30 * time.Hour)); at = at.Add(24 * time.Second) {
		add(at, "mallory", 0.3)
	}
	// Log lines in time order: a message's lines span a few seconds, a
	// deferred one's retry comes ten minutes later.
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for n, m := range msgs {
		qid := fmt.Sprintf("%010X", n+1)
		rcpt := fmt.Sprintf("r%d.%s@example.net", n, m.user)
		l := func(d time.Duration, prog, text string) {
			lines = append(lines, line{m.at.Add(d), fmt.Sprintf("mx postfix/%s[%d]: %s: %s", prog, 1000+n%50, qid, text)})
		}
		l(0, "smtpd", fmt.Sprintf("client=laptop.example.org[192.0.2.%d], sasl_method=PLAIN, sasl_username=%s", 10+n%40, m.user))
		l(100*time.Millisecond, "cleanup", fmt.Sprintf("message-id=<%s@example.org>", qid))
		l(200*time.Millisecond, "qmgr", fmt.Sprintf("from=<%s@example.org>, size=%d, nrcpt=1 (queue active)", m.user, 2000+n%5000))
		done := 2 * time.Second
		if m.def {
			l(done, "smtp", "to=<"+rcpt+">, relay=none, delay=2, delays=0/0/2/0, dsn=4.4.1, status=deferred (connect to mx.example.net[198.51.100.1]:25: Connection refused)")
			done = 10 * time.Minute
		}
		if m.bad {
			l(done, "smtp", "to=<"+rcpt+">, relay=mx.example.net[198.51.100.1]:25, delay=2, delays=0/0/1/1, dsn=5.1.1, status=bounced (host mx.example.net[198.51.100.1] said: 550 5.1.1 <"+rcpt+">: Recipient address rejected: User unknown (in reply to RCPT TO command))")
		} else {
			l(done, "smtp", "to=<"+rcpt+">, relay=mx.example.net[198.51.100.1]:25, delay=2, delays=0/0/1/1, dsn=2.0.0, status=sent (250 2.0.0 Ok)")
		}
		l(done+100*time.Millisecond, "qmgr", "removed")
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	for _, l := range lines {
		fmt.Fprintf(w, "%s %s\n", l.at.Format("2006-01-02T15:04:05.000000-07:00"), l.text)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestSuggestOutcomeLimitFromMaillog turns a month of mail log into a
// trace with its outcomes, lets suggest propose an unknown-recipient limit
// from it, and simulates that limit under a 200/h volume limit: mallory,
// 150 messages an hour (under the volume limit) with 30% unknown
// recipients, is frozen by the outcome limit within her first hour, and no
// other sender is refused, sales with her 1% of unknown recipients at 60
// messages an hour among them.
func TestSuggestOutcomeLimitFromMaillog(t *testing.T) {
	dir := t.TempDir()
	logPath, trace := filepath.Join(dir, "mail.log"), filepath.Join(dir, "month.jsonl")
	writeOutcomeMonth(t, logPath)
	stack := func(unknown string) string {
		return limitTable(`name = "hourly"`, `key = ["sasl_username"]`, `limit = 200`, `period = "1h"`) +
			limitTable(`name = "unknown"`, `key = ["sasl_username"]`, `per = "unknown_rcpt"`, `limit = `+unknown,
				`period = "1h"`, `action = "freeze"`, `mode = "strict"`)
	}
	cfg := writeConfig(t, dir, "127.0.0.1:0", stack("1000"))
	if out, err := cli(t, "trace", "from-maillog", "--tz", "UTC", "-o", trace, logPath); err != nil ||
		!strings.Contains(out, "from 32 senders") {
		t.Fatalf("trace from-maillog: %v\n%s", err, out)
	}
	tr, err := simulate.ReadFile(trace, "")
	if err != nil {
		t.Fatal(err)
	}
	// Per sender: unknown recipients, deferrals, messages.
	unknown, deferred, sent := map[string]int{}, 0, map[string]int{}
	for _, e := range tr.Entries {
		switch u := e.Request.SASLUsername; {
		case e.Outcome == policy.OutcomeUnknownRcpt:
			unknown[u]++
		case e.Outcome == policy.OutcomeDeferral:
			deferred++
		case e.Outcome == 0 && e.Request.ProtocolState == policy.StateEndOfMessage:
			sent[u]++
		}
	}
	if sent["mallory"] != 4500 || unknown["mallory"] < 1250 || unknown["mallory"] > 1450 || unknown["sales"] < 50 ||
		unknown["sales"] > 200 || deferred < 40 {
		t.Fatalf("trace: mallory %d messages, %d unknown; sales %d of %d unknown; %d deferrals", sent["mallory"], unknown["mallory"],
			unknown["sales"], sent["sales"], deferred)
	}

	out, err := cli(t, "-c", cfg, "suggest", trace)
	if err != nil {
		t.Fatalf("suggest: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^  proposed: (\d+) unknown recipients per 1h, the floor of outcome limits`).FindStringSubmatch(out)
	if m == nil || m[1] != "10" || !strings.Contains(out[strings.Index(out, `limit "unknown"`):], "outlier: mallory") {
		t.Fatalf("suggest proposes no floor-sized unknown_rcpt limit with mallory an outlier:\n%s", out)
	}

	cfg = writeConfig(t, dir, "127.0.0.1:0", stack(m[1]))
	out, err = cli(t, "-c", cfg, "simulate", "--refused", "--format", "csv", trace)
	if err != nil {
		t.Fatalf("simulate: %v\n%s", err, out)
	}
	rows := strings.Split(strings.TrimSpace(out), "\n")
	header := strings.Split(rows[0], ",")
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q in %q", name, rows[0])
		return 0
	}
	cTime, cKey, cLimit := col("time"), col("key"), col("limit")
	var first time.Time
	for _, r := range rows[1:] {
		f := strings.Split(r, ",")
		if f[cKey] != "mallory" || f[cLimit] != "unknown" {
			t.Fatalf("refused other than mallory by the outcome limit: %s", r)
		}
		at, err := time.Parse(time.RFC3339, f[cTime])
		if err != nil {
			t.Fatal(err)
		}
		if first.IsZero() {
			first = at
		}
	}
	if len(rows) < 100 || first.Before(spamStart) || first.Sub(spamStart) > time.Hour {
		t.Fatalf("%d refused requests, the first at %v; want mallory refused within the hour after %v", len(rows)-1, first, spamStart)
	}
	t.Logf("mallory first refused %v after her first message; %d requests refused", first.Sub(spamStart), len(rows)-1)
}
