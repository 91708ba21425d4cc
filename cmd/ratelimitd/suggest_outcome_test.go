package main

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

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
