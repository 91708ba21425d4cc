package outcome

import (
	"bytes"
	"errors"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/policy"
)

func TestParseReportOfAPostmasterCopy(t *testing.T) {
	raw, err := os.ReadFile("testdata/postmaster-copy.eml")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseReport(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if rep.QueueID != "4A1B2C3D4E" || rep.Sender != "alice@example.org" || len(rep.Recipients) != 4 {
		t.Fatalf("report %+v", rep)
	}
	want := []Outcome{{"4A1B2C3D4E", "nobody@example.net", policy.OutcomeUnknownRcpt},
		{"4A1B2C3D4E", "spam@example.net", policy.OutcomeBounce},
		{"4A1B2C3D4E", "slow@example.net", policy.OutcomeDeferral}}
	if got := rep.Outcomes(); !reflect.DeepEqual(got, want) {
		t.Errorf("outcomes\n got %+v\nwant %+v", got, want)
	}
}

func TestParseReportRefusesOtherMail(t *testing.T) {
	for name, text := range map[string]string{
		"plain":      "Subject: transcript\r\n\r\nTranscript of session follows.\r\n",
		"no report":  "Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n--b--\r\n",
		"no queueid": "Content-Type: multipart/report; boundary=b\r\n\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; x\r\n\r\nFinal-Recipient: rfc822; a@b\r\nAction: failed\r\nStatus: 5.1.1\r\n--b--\r\n",
	} {
		if _, err := ParseReport(strings.NewReader(text)); !errors.Is(err, ErrNotReport) && !errors.Is(err, ErrMalformedReport) {
			t.Errorf("%s: %v, want ErrNotReport or ErrMalformedReport", name, err)
		}
	}
}

// FuzzParseReport: any input gives a report or an error, never a panic,
// and a report's outcomes are all of its queue ID.
func FuzzParseReport(f *testing.F) {
	raw, err := os.ReadFile("testdata/postmaster-copy.eml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte("Content-Type: multipart/report; boundary=b\r\n\r\n--b\r\nContent-Type: message/delivery-status\r\n\r\nX-Postfix-Queue-ID: ABCDE\r\n\r\nFinal-Recipient: x\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		rep, err := ParseReport(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, o := range rep.Outcomes() {
			if o.QueueID != rep.QueueID || o.Kind == 0 {
				t.Fatalf("outcome %+v of report %+v", o, rep)
			}
		}
	})
}

// TestNoticeServerCountsAReport: a notice delivered over LMTP is counted
// once however often it is delivered, and garbage is accepted (so it does
// not bounce to the postmaster) and counts nothing.
func TestNoticeServerCountsAReport(t *testing.T) {
	raw, err := os.ReadFile("testdata/postmaster-copy.eml")
	if err != nil {
		t.Fatal(err)
	}
	e, sink := joinedSink(t, "4A1B2C3D4E")
	ns := NewNoticeServer(sink, nil)
	addr := serve(t, ns.Serve, ns.Close)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := smtp.NewClientLMTP(conn)
	defer c.Close()
	if err := c.Hello("mx.example.org"); err != nil {
		t.Fatal(err)
	}
	for _, msg := range [][]byte{raw, raw, []byte("garbage\r\n")} {
		if err := c.SendMail("", []string{"bounces@ratelimitd.invalid"}, bytes.NewReader(msg)); err != nil {
			t.Fatal(err)
		}
	}
	if got := rate(t, e, "unknown", "alice"); got < 0.99 || got > 1.01 {
		t.Errorf("alice's unknown recipients %v, want 1", got)
	}
	if got := rate(t, e, "bounces", "alice"); got < 1.98 || got > 2.01 {
		t.Errorf("alice's bounces %v, want 2", got)
	}
}

// joinedSink returns an engine and a Sink into it whose join has alice's
// message queueID.
func joinedSink(t *testing.T, queueID string) (*policy.Engine, *Sink) {
	t.Helper()
	e := testEngine(t)
	j := NewJoin(nil, Options{})
	j.Record(queueID, Submission{Time: time.Now(), SASLUsername: "alice", Sender: "alice@example.org"})
	return e, NewSink(j, e)
}

// serve runs a server on a loopback port until the test ends and returns
// the address.
func serve(t *testing.T, run func(net.Listener) error, stop func() error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go run(l)
	t.Cleanup(func() { stop() })
	return l.Addr().String()
}
