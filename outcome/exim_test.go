package outcome

import (
	"bufio"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
)

func TestParseEximEvent(t *testing.T) {
	req := func(lines ...string) string { return strings.Join(lines, "\n") + "\n\n" }
	base := []string{"request=exim_outcome", "queue_id=1wXyZ2-000Abc-Q1", "recipient=nobody@example.net"}
	for _, c := range []struct {
		in   string
		want policy.OutcomeKind
		err  error
	}{
		{req(append(base, "event=msg:fail:delivery", "data=SMTP error from remote mail server after RCPT TO:<nobody@example.net>: 550 5.1.1 no such user")...), policy.OutcomeUnknownRcpt, nil},
		{req(append(base, "event=msg:fail:delivery", "data=550 5.7.1 spam")...), policy.OutcomeBounce, nil},
		{req(append(base, "event=msg:fail:internal", "data=Unrouteable address")...), policy.OutcomeBounce, nil},
		{req(append(base, "event=msg:defer", "data=451 4.7.1 greylisted")...), policy.OutcomeDeferral, nil},
		{strings.Join(append(base, "event=msg:rcpt:defer"), "\n"), policy.OutcomeDeferral, nil}, // end of input ends it
		{req(append(base, "event=msg:delivery")...), 0, ErrEximIgnored},
		{req("request=exim_outcome", "queue_id=1wXyZ2-000Abc-Q1", "recipient=", "event=msg:fail:delivery"), 0, ErrEximIgnored},
		{req("request=smtpd_access_policy", "queue_id=1wXyZ2-000Abc-Q1", "recipient=a@b", "event=msg:fail:delivery"), 0, ErrEximMalformed},
		{req("request=exim_outcome", "queue_id=../../x", "recipient=a@b", "event=msg:fail:delivery"), 0, ErrEximMalformed},
		{req("request=exim_outcome", "no equals sign"), 0, ErrEximMalformed},
		{"", 0, ErrEximMalformed},
		{"request=exim_outcome\ndata=" + strings.Repeat("x", 5000) + "\n\n", 0, ErrEximMalformed},
	} {
		o, err := ParseEximEvent(bufio.NewReaderSize(strings.NewReader(c.in), maxEximLine+2))
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%.60q: error %v, want %v", c.in, err, c.err)
			}
			continue
		}
		if err != nil || o.Kind != c.want || o.QueueID != "1wXyZ2-000Abc-Q1" || o.Recipient != "nobody@example.net" {
			t.Errorf("%.60q: %+v, %v; want kind %v", c.in, o, err, c.want)
		}
	}
}

func FuzzParseEximEvent(f *testing.F) {
	f.Add([]byte("request=exim_outcome\nevent=msg:fail:delivery\nqueue_id=1wXyZ2-000Abc-Q1\nrecipient=a@b\ndata=550 5.1.1 x\n\n"))
	f.Add([]byte("request=exim_outcome\nevent=msg:defer\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := ParseEximEvent(bufio.NewReaderSize(strings.NewReader(string(b)), maxEximLine+2))
		if err == nil && (o.Kind == 0 || !maillog.ValidQueueID(o.QueueID) || o.Recipient == "") {
			t.Fatalf("accepted %+v", o)
		}
	})
}

// TestEximServerCountsEvents: events over the readsocket protocol are
// counted once per recipient; garbage is closed unanswered.
func TestEximServerCountsEvents(t *testing.T) {
	e, sink := joinedSink(t, "1wXyZ2-000Abc-Q1")
	s := NewEximServer(sink, nil)
	addr := serve(t, s.Serve, s.Close)
	send := func(req string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		c.(*net.TCPConn).CloseWrite()
		b, _ := io.ReadAll(c)
		return string(b)
	}
	for i, r := range []string{"a@example.net", "b@example.net", "a@example.net"} {
		got := send("request=exim_outcome\nevent=msg:fail:delivery\nqueue_id=1wXyZ2-000Abc-Q1\nrecipient=" + r + "\ndata=550 5.1.1 no such user\n")
		if got != "action=DUNNO\n\n" {
			t.Fatalf("event %d: reply %q", i, got)
		}
	}
	if got := send("garbage\n\n"); got != "" {
		t.Errorf("garbage answered %q", got)
	}
	if got := rate(t, e, "unknown", "alice"); got < 1.98 || got > 2.01 {
		t.Errorf("alice's unknown recipients %v, want 2", got)
	}
}
