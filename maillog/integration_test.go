//go:build integration

package maillog

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

var msgIDRE = regexp.MustCompile(`(?m)^Message-ID: <([^>]+)>`)

// sent is what the test sent in one message.
type sent struct {
	user, from, addr string
	to               []string
	data             []byte
}

// TestIntegrationPostfixMaillog runs a real private Postfix (maillog_file
// set by mtatest), sends as several XCLIENT users — single messages, a
// burst of 20, a message to three recipients — and reads the log Postfix
// wrote: every line parses, and every message is found once with the
// user, client address, sender, recipients and size that were sent, dated
// (the log has no year) between the test's start and end.
func TestIntegrationPostfixMaillog(t *testing.T) {
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr()})
	begin := time.Now().Add(-time.Second)

	var all []sent
	send := func(user, addr string, to ...string) {
		from := user + "@example.org"
		m := sent{user: user, from: from, addr: addr, to: to,
			data: mtatest.BuildMessage(from, to[0], fmt.Sprintf("message %d from %s", len(all)+1, user),
				strings.Repeat("line of text\n", 1+len(all)%7))}
		if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: user, ClientAddr: addr, From: from, To: to, Data: m.data}); err != nil {
			t.Fatalf("send %d as %s: %v", len(all)+1, user, err)
		}
		all = append(all, m)
	}
	for i := 0; i < 3; i++ {
		send("alice", "192.0.2.7", fmt.Sprintf("friend%d@example.net", i))
	}
	for i := 0; i < 20; i++ { // bob's burst
		send("bob", "192.0.2.8", "list@example.net")
	}
	send("carol", "192.0.2.9", "a@example.net", "b@example.net", "c@example.com")
	got := sink.WaitCount(t, len(all), 60*time.Second)

	// The log reaches the file through postlogd a moment after delivery.
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(pf.Log(), ": removed") < len(all) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d \"removed\" lines after 30s:\n%s", strings.Count(pf.Log(), ": removed"), pf.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	end := time.Now().Add(time.Second)

	r := NewReader(Options{})
	if err := r.ReadFile(pf.LogFile()); err != nil {
		t.Fatal(err)
	}
	msgs := r.Messages()
	st := r.Stats()
	if st.Unparsable != 0 {
		t.Fatalf("%d unparsable lines in Postfix's own log: %q", st.Unparsable, st.Samples)
	}
	if len(msgs) != len(all) || st.Senders != 3 || st.Recipients != 3+20+3 {
		t.Fatalf("%d messages, %d senders, %d recipients; want %d, 3, 26\n%s", len(msgs), st.Senders, st.Recipients, len(all), pf.Log())
	}
	// What the sink received, by Message-ID, to compare sizes: Postfix's
	// size= is the message as it would go over SMTP (CRLF line ends),
	// including the Received: header smtpd added, which the sink sees too.
	delivered := map[string][]byte{}
	for _, m := range got {
		delivered[strings.Trim(m.Header("Message-ID"), "<>")] = m.Data
	}
	byID := map[string]Message{}
	for _, m := range msgs {
		byID[m.MessageID] = m
	}
	for i, s := range all {
		id := string(msgIDRE.FindSubmatch(s.data)[1])
		m, ok := byID[id]
		if !ok {
			t.Fatalf("message %d (%s) not found in the log", i+1, id)
		}
		if m.SASLUsername != s.user || m.ClientAddress != s.addr || m.Sender != s.from ||
			!slices.Equal(slices.Sorted(slices.Values(m.Recipients)), slices.Sorted(slices.Values(s.to))) || m.RecipientCount() != len(s.to) {
			t.Errorf("message %d: got %+v\nsent %+v", i+1, m, s)
		}
		if want := len(delivered[id]); m.Size != int64(want) {
			t.Errorf("message %d: size %d, the sink received %d bytes", i+1, m.Size, want)
		}
		if m.Queued.Before(begin) || m.Queued.After(end) || m.Received.After(m.Queued) {
			t.Errorf("message %d: received %v, queued %v; the test ran from %v to %v", i+1, m.Received, m.Queued, begin, end)
		}
	}

	// The trace reads back with one END-OF-MESSAGE per message and one
	// RCPT per recipient, bob's burst among them.
	var b bytes.Buffer
	writeTrace(t, &b, Trace(msgs))
	tr, err := simulate.Read(&b, simulate.FormatJSONL)
	if err != nil {
		t.Fatal(err)
	}
	perUser := map[string][2]int{}
	for _, e := range tr.Entries {
		c := perUser[e.Request.SASLUsername]
		if e.Request.ProtocolState == policy.StateRcpt {
			c[0]++
		} else {
			c[1]++
		}
		perUser[e.Request.SASLUsername] = c
	}
	if want := map[string][2]int{"alice": {3, 3}, "bob": {20, 20}, "carol": {3, 1}}; fmt.Sprint(perUser) != fmt.Sprint(want) {
		t.Fatalf("trace requests per user (RCPT, END-OF-MESSAGE) %v, want %v", perUser, want)
	}
}
