package outcome

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

func testEngine(t testing.TB) *policy.Engine {
	t.Helper()
	e, err := policy.NewEngine(policy.Config{Limits: []policy.LimitConfig{
		{Name: "bounces", Key: policy.KeyList{"sasl_username"}, Per: "bounce", Limit: 100, Period: policy.Duration(time.Hour)},
		{Name: "unknown", Key: policy.KeyList{"sasl_username"}, Per: "unknown_rcpt", Limit: 10, Period: policy.Duration(time.Hour), Action: "freeze"},
		{Name: "deferrals", Key: policy.KeyList{"sender"}, Per: "deferral", Limit: 100, Period: policy.Duration(time.Hour)},
		{Name: "ratio", Key: policy.KeyList{"sasl_username"}, Per: "bounce", Ratio: 0.1, MinCount: 50, Period: policy.Duration(time.Hour)},
	}}, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func rate(t testing.TB, e *policy.Engine, limit, key string) float64 {
	t.Helper()
	s, err := e.Store().Get(context.Background(), limit, key)
	if err != nil {
		t.Fatal(err)
	}
	return s.Rate
}

// TestLogFeedCountsEachOutcomeOnce reads a Postfix log: bounces count
// once per recipient, a deferral retried counts once, a postsuper -d
// removal and a held message's bounce count nothing, nor does the log of
// a message no request or smtpd line joined.
func TestLogFeedCountsEachOutcomeOnce(t *testing.T) {
	e := testEngine(t)
	j := NewJoin(nil, Options{})
	f := &LogFeed{Join: j, Sink: NewSink(j, e)}
	lines := []string{
		// Joined by the log itself.
		"Dec  1 10:00:00 mx postfix/submission/smtpd[10]: 4A1B2C3D4E: client=pc[192.0.2.7], sasl_method=PLAIN, sasl_username=alice",
		"Dec  1 10:00:00 mx postfix/qmgr[11]: 4A1B2C3D4E: from=<alice@example.org>, size=300, nrcpt=4 (queue active)",
		"Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<a@example.net>, relay=mx[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=5.1.1, status=bounced (host mx[192.0.2.9] said: 550 5.1.1 <a@example.net>: no such user (in reply to RCPT TO command))",
		"Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<b@example.net>, relay=mx[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=5.7.1, status=bounced (host said: 550 5.7.1 spam)",
		"Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<c@example.net>, relay=mx[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=4.2.0, status=deferred (host said: 450 4.2.0 greylisted)",
		"Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<d@example.net>, relay=mx[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=2.0.0, status=sent (250 ok)",
		"Dec  1 10:05:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<c@example.net>, relay=mx[192.0.2.9]:25, delay=300, delays=0/0/0/1, dsn=4.2.0, status=deferred (host said: 450 4.2.0 greylisted)",
		"Dec  1 10:05:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<a@example.net>, relay=mx[192.0.2.9]:25, delay=1, delays=0/0/0/1, dsn=5.1.1, status=bounced (the same line read twice)",
		// Deleted by the postmaster: no failure.
		"Dec  1 10:06:00 mx postfix/smtpd[10]: 5B1B2C3D4F: client=pc[192.0.2.7], sasl_method=PLAIN, sasl_username=alice",
		"Dec  1 10:06:01 mx postfix/postsuper[20]: 5B1B2C3D4F: removed",
		"Dec  1 10:06:02 mx postfix/smtp[12]: 5B1B2C3D4F: to=<x@example.net>, relay=none, delay=1, dsn=5.1.1, status=bounced (late line)",
		// Held (by us or a header check): its fate is the postmaster's.
		"Dec  1 10:07:00 mx postfix/smtpd[10]: 6C1B2C3D4F: client=pc[192.0.2.7], sasl_method=PLAIN, sasl_username=alice",
		"Dec  1 10:07:00 mx postfix/cleanup[13]: 6C1B2C3D4F: hold: END-OF-MESSAGE from pc[192.0.2.7]: 4.7.1 held; from=<alice@example.org> to=<y@example.net> proto=ESMTP helo=<pc>",
		"Dec  1 10:08:00 mx postfix/smtp[12]: 6C1B2C3D4F: to=<y@example.net>, relay=mx[192.0.2.9]:25, delay=60, dsn=5.1.1, status=bounced (after release)",
		// Never joined: a bounce message, local mail.
		"Dec  1 10:09:00 mx postfix/smtp[12]: 7D1B2C3D4F: to=<z@example.net>, relay=mx[192.0.2.9]:25, delay=1, dsn=5.1.1, status=bounced (x)",
		"garbage",
	}
	for _, l := range lines {
		f.Line(context.Background(), l)
	}
	if got := rate(t, e, "unknown", "alice"); got < 0.99 || got > 1.01 {
		t.Errorf("unknown recipients of alice: rate %v, want 1", got)
	}
	if got := rate(t, e, "bounces", "alice"); got < 1.98 || got > 2.01 {
		t.Errorf("bounces of alice: rate %v, want 2 (5.1.1 and 5.7.1)", got)
	}
	if got := rate(t, e, "ratio/rcpt", "alice"); got < 3.99 || got > 4.01 {
		t.Errorf("recipients of alice: rate %v, want 4 (qmgr's nrcpt of the message the log joined)", got)
	}
	if got := rate(t, e, "deferrals", "alice@example.org"); got < 0.99 || got > 1.01 {
		t.Errorf("deferrals of alice@example.org: rate %v, want 1 (one recipient retried)", got)
	}
	s := f.Sink
	if s.Counted.Total() != 3 || s.Repeated.Total() != 2 || s.Unjoined.Total() != 3 {
		t.Errorf("counted %d, repeated %d, unjoined %d; want 3, 2, 3", s.Counted.Total(), s.Repeated.Total(), s.Unjoined.Total())
	}
}

// TestLogFeedKeepsTheRequestsJoin: a message the policy service joined at
// END-OF-MESSAGE keeps that join (with its sender) over smtpd's line.
func TestLogFeedKeepsTheRequestsJoin(t *testing.T) {
	e := testEngine(t)
	j := NewJoin(nil, Options{})
	now := time.Now()
	j.Record("4A1B2C3D4E", SubmissionOf(now, &policy.Request{SASLUsername: "bob", Sender: "bob@example.org"}))
	f := &LogFeed{Join: j, Sink: NewSink(j, e)}
	f.Line(context.Background(), "Dec  1 10:00:00 mx postfix/smtpd[10]: 4A1B2C3D4E: client=pc[192.0.2.7], sasl_method=PLAIN, sasl_username=mallory")
	for i := range 3 {
		f.Line(context.Background(), fmt.Sprintf("Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<u%d@example.net>, relay=none, delay=1, dsn=5.1.1, status=bounced (x)", i))
	}
	if got := rate(t, e, "unknown", "bob"); got < 2.9 {
		t.Errorf("bob's unknown recipients: %v, want 3", got)
	}
	if got := rate(t, e, "unknown", "mallory"); got != 0 {
		t.Errorf("mallory was charged %v for bob's message", got)
	}
}

// FuzzLogFeedLine: any log line is taken without a panic, and counts at
// most one outcome.
func FuzzLogFeedLine(f *testing.F) {
	f.Add("Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<a@example.net>, relay=mx[192.0.2.9]:25, dsn=5.1.1, status=bounced (550 5.1.1 x)")
	f.Add("Dec  1 10:00:00 mx postfix/smtpd[10]: 4A1B2C3D4E: client=pc[192.0.2.7], sasl_method=PLAIN, sasl_username=alice")
	f.Add("2026-12-01T10:00:00.000000+00:00 mx postfix/qmgr[11]: 4A1B2C3D4E: removed")
	f.Add("Dec  1 10:00:00 mx postfix/smtpd[10]: NOQUEUE: reject: RCPT from pc[192.0.2.7]: 550 5.1.1 <n@x>: Recipient address rejected: User unknown; from=<a@b> to=<n@x> proto=ESMTP helo=<pc>")
	e := testEngine(f)
	f.Fuzz(func(t *testing.T, line string) {
		j := NewJoin(nil, Options{})
		j.Record("4A1B2C3D4E", Submission{Time: time.Now(), SASLUsername: "alice"})
		j.Saw(time.Now(), &policy.Request{SASLUsername: "alice", Sender: "a@b", ClientAddress: "192.0.2.7"})
		lf := &LogFeed{Join: j, Sink: NewSink(j, e)}
		lf.Line(context.Background(), line)
		if n := lf.Sink.Counted.Total() + lf.Sink.Repeated.Total() + lf.Sink.Unjoined.Total(); n > 1 {
			t.Fatalf("one line gave %d outcomes", n)
		}
	})
}

// TestLogFeedCountsNoQueueRejectsOfALogin: smtpd's reject of an unknown
// recipient counts for the login last seen with its client and sender,
// each attempt once; a reject of another client or sender, of another
// kind, by postscreen, or older than the window counts nothing.
func TestLogFeedCountsNoQueueRejectsOfALogin(t *testing.T) {
	e := testEngine(t)
	j := NewJoin(nil, Options{})
	now := time.Now()
	f := &LogFeed{Join: j, Sink: NewSink(j, e), now: func() time.Time { return now }}
	j.Saw(now.Add(-time.Minute), &policy.Request{SASLUsername: "alice", Sender: "Alice@example.org", ClientAddress: "192.0.2.7"})
	j.Saw(now.Add(-2*time.Hour), &policy.Request{SASLUsername: "carol", Sender: "carol@example.org", ClientAddress: "192.0.2.8"})
	j.Saw(now, &policy.Request{Sender: "dave@example.org", ClientAddress: "192.0.2.9"}) // no login
	reject := func(prog, client, code, from string) string {
		return rejectIn("NOQUEUE", prog, client, code, from)
	}
	for _, l := range []string{
		reject("submission/smtpd", "192.0.2.7", "550 5.1.1", "alice@example.org"),
		reject("smtpd", "192.0.2.7", "550 5.1.1", "alice@example.org"), // the client tried again
		// after an accepted recipient, in a message not yet joined
		rejectIn("4A1B2C3D4E", "smtpd", "192.0.2.7", "550 5.1.1", "alice@example.org"),
		rejectIn("4A1B2C3D4E", "smtpd", "192.0.2.7", "554 5.7.1", "alice@example.org"),
		reject("smtpd", "192.0.2.99", "550 5.1.1", "alice@example.org"),
		reject("smtpd", "192.0.2.7", "554 5.7.1", "alice@example.org"),
		reject("postscreen", "192.0.2.7", "550 5.1.1", "alice@example.org"),
		reject("smtpd", "192.0.2.8", "550 5.1.1", "carol@example.org"),
		reject("smtpd", "192.0.2.9", "550 5.1.1", "dave@example.org"),
	} {
		f.Line(context.Background(), l)
	}
	for _, limit := range []string{"unknown", "ratio", "ratio/rcpt"} {
		if got := rate(t, e, limit, "alice"); got < 2.99 || got > 3.01 {
			t.Errorf("alice's %s: %v, want 3", limit, got)
		}
	}
	for _, k := range []string{"carol", "dave", ""} {
		if got := rate(t, e, "unknown", k); got != 0 {
			t.Errorf("%q was charged %v", k, got)
		}
	}
	if s := f.Sink; s.Counted.Total() != 3 || s.Unjoined.Total() != 3 {
		t.Errorf("counted %d, unjoined %d; want 3, 3", s.Counted.Total(), s.Unjoined.Total())
	}
}

// rejectIn is smtpd's reject of an unknown recipient n@example.net at RCPT,
// logged under id (NOQUEUE, or the queue ID once the message has a queue
// file), from client with reply code.
func rejectIn(id, prog, client, code, from string) string {
	return "Dec  1 10:00:00 mx postfix/" + prog + "[10]: " + id + ": reject: RCPT from pc[" + client + "]: " + code +
		" <n@example.net>: Recipient address rejected: User unknown; from=<" + from + "> to=<n@example.net> proto=ESMTP helo=<pc>"
}

// Total returns how many outcomes of every kind c counted.
func (c *Counts) Total() int64 {
	var n int64
	for i := range c {
		n += c[i].Load()
	}
	return n
}

// TestLogFeedReadsLinesAppendedAfterBegin: a line appended after Begin
// is counted however late Run starts (the daemon starts Run in a
// goroutine), also when the log is created after Begin; a line before
// Begin is not.
func TestLogFeedReadsLinesAppendedAfterBegin(t *testing.T) {
	for _, exists := range []bool{true, false} {
		e := testEngine(t)
		j := NewJoin(nil, Options{})
		path := filepath.Join(t.TempDir(), "mail.log")
		bounce := func(rcpt string) string {
			return "Dec  1 10:00:01 mx postfix/smtp[12]: 4A1B2C3D4E: to=<" + rcpt + "@example.net>, relay=none, delay=1, dsn=5.1.1, status=bounced (x)"
		}
		if exists {
			writeLines(t, path, bounce("before"))
		}
		j.Record("4A1B2C3D4E", SubmissionOf(time.Now(), &policy.Request{SASLUsername: "bob"}))
		f := &LogFeed{Join: j, Sink: NewSink(j, e), Follower: maillog.Follower{Path: path, Poll: 5 * time.Millisecond}}
		if err := f.Begin(); err != nil {
			t.Fatal(err)
		}
		writeLines(t, path, bounce("after"))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); f.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for rate(t, e, "unknown", "bob") < 0.99 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		cancel()
		<-done
		if got := rate(t, e, "unknown", "bob"); got < 0.99 || got > 1.01 {
			t.Errorf("log existed before Begin %v: bob's unknown recipients %v, want 1 (the line after Begin only)", exists, got)
		}
	}
}

func writeLines(t *testing.T, path string, lines ...string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
}
