package maillog

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

const fixtures = "../testdata/maillog"

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v.UTC()
}

// brief is the part of a Message the fixtures pin down.
type brief struct {
	Host, QueueID, User, Sender, Client string
	Size                                int64
	Rcpts                               []string
	NRcpt                               int
	Queued                              string
}

func briefs(msgs []Message) []brief {
	var out []brief
	for _, m := range msgs {
		out = append(out, brief{m.Host, m.QueueID, m.SASLUsername, m.Sender, m.ClientAddress, m.Size,
			m.Recipients, m.RecipientCount(), m.Queued.Format(time.RFC3339Nano)})
	}
	return out
}

func readFixture(t *testing.T, opts Options, names ...string) ([]Message, Stats) {
	t.Helper()
	r := NewReader(opts)
	for _, n := range names {
		if err := r.ReadFile(filepath.Join(fixtures, n)); err != nil {
			t.Fatal(err)
		}
	}
	msgs := r.Messages()
	return msgs, r.Stats()
}

var classicWant = []brief{
	{"mx1", "4A1B2C3D4E", "alice", "alice@example.org", "192.0.2.7", 1234,
		[]string{"bob@example.net", "carol@example.net", "postmaster@example.org"}, 3, "2026-12-31T23:58:01Z"},
	{"mx2", "4A1B2C3D4E", "bob", "bob@example.org", "192.0.2.8", 777,
		[]string{"zoe@example.net"}, 1, "2026-12-31T23:58:01Z"},
	{"mx2", "5B6C7D8E9F", "erin@example.com", "erin@example.com", "198.51.100.20", 5000,
		[]string{"frank@example.net"}, 1, "2026-12-31T23:59:30Z"},
	{"mx1", "4Tq9Wb1XyzzJk3L", "alice", "alice@example.org", "2001:db8::7", 2048,
		[]string{"grace@example.net"}, 1, "2027-01-01T00:03:02Z"},
	{"mx1", "9F0A1B2C3D", "henry", "henry@example.org", "192.0.2.11", 0,
		[]string{"ivy@example.net"}, 1, "2027-01-01T00:10:01Z"},
}

// TestClassicSyslog reads year-less timestamps across New Year, two hosts
// sharing a queue ID, a deferred message retried by qmgr (one message), a
// pickup message, END-OF-MESSAGE rejects (smtpd, milter), a message put
// on hold and never released (it was sent: in the trace) and unparsable
// lines.
func TestClassicSyslog(t *testing.T) {
	msgs, st := readFixture(t, Options{Location: time.UTC, End: mustTime(t, "2027-01-02T12:00:00Z")}, "postfix-classic.log")
	if got := briefs(msgs); !reflect.DeepEqual(got, classicWant) {
		t.Fatalf("messages:\n got %+v\nwant %+v", got, classicWant)
	}
	if st.Messages != 5 || st.Senders != 4 || st.NotSMTP != 1 || st.Rejected != 2 || st.NoQueue != 1 || st.Unparsable != 2 || st.Held != 1 {
		t.Fatalf("stats %+v", st)
	}
	if !strings.Contains(st.Samples[0], "postfix-classic.log:19:") || !strings.Contains(st.Samples[1], ":35: ") {
		t.Fatalf("samples %q", st.Samples)
	}
	if st.Start != mustTime(t, "2026-12-31T23:58:01Z") || st.End != mustTime(t, "2027-01-01T00:10:01Z") {
		t.Fatalf("span %v .. %v", st.Start, st.End)
	}
	var b bytes.Buffer
	if err := st.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"5 messages (7 recipients) from 4 senders", "2026-12-31T23:58:01Z to 2027-01-01T00:10:01Z",
		"2 lines unparsable", "1 not received over SMTP", "2 rejected after", "1 NOQUEUE", "1 messages on hold"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// TestYearFromModTime dates a year-less log by the file's modification
// time when no End is given: a log written in early January 2031 puts
// its December lines in 2030.
func TestYearFromModTime(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(fixtures, "postfix-classic.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "maillog")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	mt := mustTime(t, "2031-01-01T00:10:00Z")
	if err := os.Chtimes(p, mt, mt); err != nil {
		t.Fatal(err)
	}
	r := NewReader(Options{Location: time.UTC})
	if err := r.ReadFile(p); err != nil {
		t.Fatal(err)
	}
	msgs := r.Messages()
	if len(msgs) != 5 || msgs[0].Queued.Year() != 2030 || msgs[3].Queued.Year() != 2031 {
		t.Fatalf("years: %v", briefs(msgs))
	}
}

// TestRotatedGzip splits the classic log into a rotated, compressed
// first half and a current second half, given in the wrong order: the
// messages are the same, including the deferred one that spans both.
func TestRotatedGzip(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtures, "postfix-classic.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	old, cur := strings.Join(lines[:20], ""), strings.Join(lines[20:], "")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(old))
	zw.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "maillog.1.gz"), gz.Bytes(), 0o644)
	os.WriteFile(filepath.Join(dir, "maillog"), []byte(cur), 0o644)
	r := NewReader(Options{Location: time.UTC, End: mustTime(t, "2027-01-02T12:00:00Z")})
	for _, n := range []string{"maillog", "maillog.1.gz"} {
		if err := r.ReadFile(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if got := briefs(r.Messages()); !reflect.DeepEqual(got, classicWant) {
		t.Fatalf("messages:\n got %+v\nwant %+v", got, classicWant)
	}
	if st := r.Stats(); st.Files != 2 || st.Lines != len(lines)-1 {
		t.Fatalf("stats %+v (want 2 files, %d lines)", st, len(lines)-1)
	}
}

// TestRFC3339Syslog reads RFC 3339 timestamps with microseconds and
// offsets, with and without a colon; an unauthenticated relay client
// sending a bounce is a message with no SASL user.
func TestRFC3339Syslog(t *testing.T) {
	msgs, st := readFixture(t, Options{}, "postfix-rfc3339.log")
	want := []brief{
		{"mx1", "9A8B7C6D5E", "alice", "alice@example.org", "192.0.2.7", 4321,
			[]string{"bob@example.net", "carol@example.net"}, 2, "2026-11-23T12:33:57.223456Z"},
		{"mx1", "9A8B7C6D5F", "", "", "198.51.100.30", 900,
			[]string{"alice@example.org"}, 1, "2026-11-23T12:40:00Z"},
	}
	if got := briefs(msgs); !reflect.DeepEqual(got, want) {
		t.Fatalf("messages:\n got %+v\nwant %+v", got, want)
	}
	if st.Unparsable != 1 || st.Senders != 2 {
		t.Fatalf("stats %+v", st)
	}
	if !msgs[0].Received.Equal(mustTime(t, "2026-11-23T12:33:57.123456Z")) {
		t.Fatalf("received %v", msgs[0].Received)
	}
}

// TestEximMainlog reads arrivals with A= and U=, recipients from the
// "for" list and from =>, ->, ** and == lines (the deferred one once),
// the original address of an alias delivery, Exim 4.97 message IDs,
// +millisec and log_timezone stamps, and skips Exim's own bounce; the **
// line is an unknown recipient (its 5.1.1), the == line a deferral.
func TestEximMainlog(t *testing.T) {
	msgs, st := readFixture(t, Options{Location: time.UTC}, "exim-mainlog")
	want := []brief{
		{"", "1qXyZa-0001Ab-Cd", "alice", "alice@example.org", "192.0.2.7", 2345,
			[]string{"bob@example.net", "carol@example.net"}, 2, "2026-11-20T09:00:01Z"},
		{"", "1rAbCd-000000001Ab-Cdef", "erin@example.com", "erin@example.com", "198.51.100.20", 10240,
			[]string{"frank@example.net"}, 1, "2026-11-20T08:05:00.123Z"},
		{"", "1qXyZb-0001Ac-De", "bob", "bob@example.org", "192.0.2.8", 500,
			[]string{"postmaster@example.org", "nobody@example.net"}, 2, "2026-11-20T09:10:00Z"},
		{"", "1qXyZd-0001Ae-Fg", "www-data", "www-data@web.example.org", "", 800,
			[]string{"victim@example.net"}, 1, "2026-11-20T09:15:00Z"},
	}
	got := briefs(msgs)
	// Exim's messages are ordered by arrival time.
	want[0], want[1] = want[1], want[0]
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("messages:\n got %+v\nwant %+v", got, want)
	}
	if st.Unparsable != 1 || st.NotSMTP != 1 || !strings.Contains(st.Samples[0], `bad S="notanumber"`) {
		t.Fatalf("stats %+v", st)
	}
	if msgs[1].SASLMethod != "dovecot_plain" || msgs[1].ClientName != "laptop.example.org" {
		t.Fatalf("alice's message: %+v", msgs[1])
	}
	var outcomes []string
	for _, m := range msgs {
		for _, o := range m.Outcomes {
			outcomes = append(outcomes, m.QueueID+" "+o.Recipient+" "+o.Kind.String())
		}
	}
	slices.Sort(outcomes)
	if want := "1qXyZb-0001Ac-De nobody@example.net unknown_rcpt, 1rAbCd-000000001Ab-Cdef frank@example.net deferral"; strings.Join(outcomes, ", ") != want {
		t.Fatalf("outcomes %q, want %s", outcomes, want)
	}
}

// TestTraceRoundTrip writes the trace of the classic fixture and reads it
// back with package simulate: the same requests, RCPT per recipient, one
// END-OF-MESSAGE per message, and as outcomes frank's deferral and the
// recipient smtpd rejected in alice's message as unknown (5.1.1).
func TestTraceRoundTrip(t *testing.T) {
	msgs, _ := readFixture(t, Options{Location: time.UTC, End: mustTime(t, "2027-01-02T12:00:00Z")}, "postfix-classic.log")
	tr := Trace(msgs)
	if len(tr.Entries) != 7+5+2 {
		t.Fatalf("%d entries, want 14", len(tr.Entries))
	}
	var outcomes []string
	for _, e := range tr.Entries {
		if e.Outcome != 0 {
			outcomes = append(outcomes, e.Request.SASLUsername+" "+e.Request.Recipient+" "+e.Outcome.String())
		}
	}
	if strings.Join(outcomes, ", ") != "erin@example.com frank@example.net deferral, alice nobody@example.org unknown_rcpt" {
		t.Fatalf("outcomes %q", outcomes)
	}
	var b bytes.Buffer
	writeTrace(t, &b, tr)
	back, err := simulate.Read(&b, simulate.FormatJSONL)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if len(back.Entries) != len(tr.Entries) {
		t.Fatalf("%d entries read back, want %d", len(back.Entries), len(tr.Entries))
	}
	for i := range tr.Entries {
		a, b := tr.Entries[i], back.Entries[i]
		if !a.Time.Equal(b.Time) || a.Count != b.Count || a.Outcome != b.Outcome || !reflect.DeepEqual(a.Request, b.Request) {
			t.Fatalf("entry %d:\n wrote %+v\n  read %+v", i, a, b)
		}
	}
	var a []string
	for e := range back.Events() {
		a = append(a, e.Time.String()+" "+e.Request.ProtocolState+" "+e.Request.Instance+" "+e.Request.Recipient)
	}
	// StreamTrace, reading the logs again, writes the same requests too.
	r2 := NewReader(Options{Location: time.UTC, End: mustTime(t, "2027-01-02T12:00:00Z")})
	if err := r2.ReadFile(filepath.Join(fixtures, "postfix-classic.log")); err != nil {
		t.Fatal(err)
	}
	var bs bytes.Buffer
	if err := r2.StreamTrace(&bs, ""); err != nil {
		t.Fatal(err)
	}
	if st := r2.Stats(); st.Messages != len(msgs) {
		t.Fatalf("StreamTrace found %d messages, Messages %d", st.Messages, len(msgs))
	}
	if back2, err := simulate.Read(&bs, simulate.FormatJSONL); err != nil {
		t.Fatal(err)
	} else {
		var s []string
		for e := range back2.Events() {
			s = append(s, e.Time.String()+" "+e.Request.ProtocolState+" "+e.Request.Instance+" "+e.Request.Recipient)
		}
		if !reflect.DeepEqual(a, s) {
			t.Fatalf("StreamTrace replays\n%s\nTrace replays\n%s", strings.Join(s, "\n"), strings.Join(a, "\n"))
		}
	}
	if d := tr.Entries[8]; d.Outcome != policy.OutcomeDeferral || d.Request.Recipient != "frank@example.net" ||
		d.Request.Instance != "mx2/5B6C7D8E9F" {
		t.Fatalf("frank's deferral: %+v", d)
	}
	eom := tr.Entries[3]
	if eom.Request.ProtocolState != policy.StateEndOfMessage || eom.Request.RecipientCount != 3 ||
		eom.Request.Size != 1234 || eom.Request.Instance != "mx1/4A1B2C3D4E" || eom.Request.Recipient != "" {
		t.Fatalf("alice's END-OF-MESSAGE request: %+v", eom.Request)
	}
}

// writeTrace writes tr as JSON Lines.
func writeTrace(t *testing.T, w io.Writer, tr *simulate.Trace) {
	t.Helper()
	enc := json.NewEncoder(w)
	for _, e := range tr.Entries {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
}
