package maillog

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestValidQueueID: Postfix's short and long forms and Exim's two are
// queue IDs; anything else, options and shell syntax above all, is not.
func TestValidQueueID(t *testing.T) {
	for _, id := range []string{"3C8F1A", "A1B2C3D4E5F6", "4LR5tD6VBnzKHk", "4Xz9Nq1c2Gz3Nbx", "1rYd5N-0003kT-Qw",
		"1rYd5N-0000000003k-Qw8A"} {
		if !ValidQueueID(id) {
			t.Errorf("ValidQueueID(%q) = false", id)
		}
	}
	for _, id := range []string{"", "ALL", "-d", "3C8F1", "4F2a12345", "4LR5tD6VBnz", "4LR5tD6VBnzKHa", "1rYd5N-0003kT-Q",
		"4F2A12345;rm", "../../etc", strings.Repeat("A", 33)} {
		if ValidQueueID(id) {
			t.Errorf("ValidQueueID(%q) = true", id)
		}
	}
}

func TestParsePostfix(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want Record
		err  string
	}{
		{"ABCDEF1234: from=<>, status=expired, returned to sender", Record{Kind: KindOther, QueueID: "ABCDEF1234"}, ""},
		{`ABCDEF1234: to=<"odd>, name"@example.net>, orig_to=<>, relay=x, status=sent (250 a, b)`,
			Record{Kind: KindTo, QueueID: "ABCDEF1234", Recipient: `"odd>, name"@example.net`, Status: "sent"}, ""},
		{"ABCDEF1234: to=<u@example.net>, relay=mx[192.0.2.9]:25, delay=0.1, delays=0/0/0/0, dsn=5.1.1, status=bounced (host mx said: 550 5.1.1 no such user, sorry)",
			Record{Kind: KindTo, QueueID: "ABCDEF1234", Recipient: "u@example.net", DSN: "5.1.1", Status: "bounced"}, ""},
		{"ABCDEF1234: client=host[IPv6:2001:db8::1]:25", Record{Kind: KindClient, QueueID: "ABCDEF1234",
			ClientName: "host", ClientAddress: "2001:db8::1"}, ""},
		{"ABCDEF1234: from=<a@b>, size=-1, nrcpt=1 (queue active)", Record{}, "bad size"},
		{"ABCDEF1234: client=nobrackets", Record{}, "malformed client"},
		{"warning: hostname does not resolve", Record{}, "not a line about a queued message"},
		{"ABCDEF1234: reject: DATA from x[1.2.3.4]: 550 no", Record{Kind: KindReject, QueueID: "ABCDEF1234", Reject: "DATA",
			ClientName: "x", ClientAddress: "1.2.3.4"}, ""},
		{"NOQUEUE: reject: RCPT from unknown[192.0.2.7]: 550 5.1.1 <n@example.net>: Recipient address rejected: User unknown; " +
			"from=<alice@example.org> to=<n@example.net> proto=ESMTP helo=<h>", Record{Kind: KindNoQueue, Reject: "RCPT",
			ClientName: "unknown", ClientAddress: "192.0.2.7", DSN: "5.1.1", Sender: "alice@example.org", Recipient: "n@example.net"}, ""},
		{"NOQUEUE: reject: RCPT from h[IPv6:2001:db8::7]: 554 4.1.1 <n@x>: no; from=<> to=<n@x>", Record{Kind: KindNoQueue,
			Reject: "RCPT", ClientName: "h", ClientAddress: "2001:db8::7", Recipient: "n@x"}, ""},
		{"ABCDEF1234: reject: RCPT from x[1.2.3.4]: 550 5.1.1 <c@d>: Recipient address rejected: User unknown; from=<a@b> to=<c@d> proto=ESMTP helo=<h>",
			Record{Kind: KindReject, QueueID: "ABCDEF1234", Reject: "RCPT", ClientName: "x", ClientAddress: "1.2.3.4", Sender: "a@b", Recipient: "c@d", DSN: "5.1.1"}, ""},
		{"ABCDEF1234: milter-hold: END-OF-MESSAGE from x[1.2.3.4]: milter triggers HOLD action; from=<a@b> to=<c@d> proto=ESMTP helo=<h>",
			Record{Kind: KindHold, QueueID: "ABCDEF1234", Reject: "END-OF-MESSAGE", ClientName: "x", ClientAddress: "1.2.3.4",
				Sender: "a@b", Recipient: "c@d"}, ""},
	} {
		got, err := ParsePostfix(c.msg)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want %q", c.msg, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q:\n got %+v, %v\nwant %+v", c.msg, got, err, c.want)
		}
	}
}

// TestYearlessOutOfOrder: a late line of the old year after New Year (two
// hosts logging to one file) stays in the old year and does not start a
// new one.
func TestYearlessOutOfOrder(t *testing.T) {
	log := strings.Join([]string{
		"Dec 31 23:59:59 a postfix/smtpd[1]: AAAAA1: client=x[192.0.2.1], sasl_username=u1",
		"Dec 31 23:59:59 a postfix/qmgr[1]: AAAAA1: from=<>, size=1, nrcpt=1 (queue active)",
		"Jan  1 00:00:01 a postfix/smtpd[1]: BBBBB2: client=x[192.0.2.1], sasl_username=u2",
		"Jan  1 00:00:01 a postfix/qmgr[1]: BBBBB2: from=<>, size=1, nrcpt=1 (queue active)",
		"Dec 31 23:59:58 b postfix/smtpd[1]: CCCCC3: client=x[192.0.2.1], sasl_username=u3",
		"Dec 31 23:59:58 b postfix/qmgr[1]: CCCCC3: from=<>, size=1, nrcpt=1 (queue active)",
		"Jan  1 00:00:02 a postfix/smtpd[1]: DDDDD4: client=x[192.0.2.1], sasl_username=u4",
		"Jan  1 00:00:02 a postfix/qmgr[1]: DDDDD4: from=<>, size=1, nrcpt=1 (queue active)",
	}, "\n") + "\n"
	r := NewReader(Options{Location: time.UTC})
	if err := r.Read("t", strings.NewReader(log), time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	var years []int
	for _, m := range r.Messages() {
		years = append(years, m.Received.Year())
	}
	// Messages come in Queued order: u3 (Dec 31 23:59:58), u1, u2, u4.
	if want := []int{2029, 2029, 2030, 2030}; !reflect.DeepEqual(years, want) {
		t.Fatalf("years %v, want %v", years, want)
	}
}

func TestParseSyslogLine(t *testing.T) {
	l, err := ParseSyslogLine("<22>Nov  3 01:02:03.5 mx postfix/submission/smtpd[77]: ABCDE: removed", time.UTC)
	if err != nil || l.Host != "mx" || l.Program != "postfix/submission/smtpd" || l.Msg != "ABCDE: removed" ||
		!l.Stamp.YearLess || l.Stamp.Time != time.Date(2000, 11, 3, 1, 2, 3, 5e8, time.UTC) {
		t.Fatalf("%+v %v", l, err)
	}
	// A stamp before 1970 is garbage: year 1, January 1st, 00:00 UTC would
	// read as the zero time, and the fuzzer made a message of it that was
	// queued at no time (testdata/fuzz/FuzzReader/b8fc6f74950f6c58).
	for _, bad := range []string{"Nov 31 01:02:03 mx p[1]: x", "Foo  3 01:02:03 mx p[1]: x", "Nov  3 01:02:03 mx", "Nov  3 25:02:03 mx p[1]: x", "Nov  3 01:02:03 mx p[x]: y",
		"0001-01-01T00:00:00+0000 mx postfix/qmgr[1]: ABCDE: removed", "1969-12-31T23:59:59Z mx postfix/qmgr[1]: ABCDE: removed"} {
		if _, err := ParseSyslogLine(bad, time.UTC); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestYearlessMalformedLine: a line with a valid year-less timestamp but
// no program tag takes part in dating in both passes alike. Before, the
// dating pass counted its new year and the joining pass did not, and the
// last message landed a year early.
func TestYearlessMalformedLine(t *testing.T) {
	line := func(stamp, id, user string) string {
		return stamp + " a postfix/smtpd[1]: " + id + ": client=x[192.0.2.1], sasl_username=" + user + "\n" +
			stamp + " a postfix/qmgr[1]: " + id + ": from=<>, size=1, nrcpt=1 (queue active)"
	}
	log := strings.Join([]string{
		line("Aug  1 10:00:00", "AAAAA1", "u1"),
		"Jan 10 00:00:00 a", // starts a new year, then a late line of the old one
		line("Jul 20 10:00:00", "BBBBB2", "u2"),
		line("Jan 20 10:00:00", "CCCCC3", "u3"),
	}, "\n") + "\n"
	r := NewReader(Options{Location: time.UTC})
	if err := r.Read("t", strings.NewReader(log), time.Date(2030, 2, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range r.Messages() {
		got = append(got, m.SASLUsername+" "+m.Queued.Format(time.DateOnly))
	}
	if want := []string{"u2 2029-07-20", "u1 2029-08-01", "u3 2030-01-20"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
}

// TestLongLine: a line over 64 KiB is counted as unparsable and skipped;
// the lines after it are read.
func TestLongLine(t *testing.T) {
	log := "Nov  1 10:00:00 a postfix/smtpd[1]: AAAAA1: client=x[192.0.2.1], sasl_username=" + strings.Repeat("x", 100<<10) + "\n" +
		"Nov  1 10:00:01 a postfix/smtpd[1]: BBBBB2: client=x[192.0.2.1], sasl_username=u2\n" +
		"Nov  1 10:00:01 a postfix/qmgr[1]: BBBBB2: from=<>, size=1, nrcpt=1 (queue active)\n"
	r := NewReader(Options{Location: time.UTC})
	if err := r.Read("t", strings.NewReader(log), time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	msgs := r.Messages()
	if st := r.Stats(); len(msgs) != 1 || msgs[0].SASLUsername != "u2" || st.Unparsable != 1 || st.Lines != 3 ||
		!strings.Contains(st.Samples[0], "t:1: line longer than 64 KiB") {
		t.Fatalf("messages %+v, stats %+v", msgs, st)
	}
}

// TestParseEximBeforeEpoch: an Exim main log line dated before 1970 is
// refused like any bad date (year 1, January 1st, 00:00 would read as the
// zero time); the same line dated now is read.
func TestParseEximBeforeEpoch(t *testing.T) {
	const rest = " 1qXyZa-0001Ab-Cd <= alice@example.org H=laptop.example.org [192.0.2.7] P=esmtpsa A=dovecot_plain:alice S=2345"
	if _, r, err := ParseExim("2026-11-20 09:00:01"+rest, time.UTC); err != nil || r.QueueID != "1qXyZa-0001Ab-Cd" {
		t.Fatalf("dated 2026: %+v, %v", r, err)
	}
	for _, day := range []string{"0001-01-01 00:00:00", "1969-12-31 23:59:59"} {
		if _, _, err := ParseExim(day+rest, time.UTC); err == nil {
			t.Errorf("dated %s: accepted", day)
		}
	}
}
