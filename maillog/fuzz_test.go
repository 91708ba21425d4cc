package maillog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// seedLines adds every line of the fixtures to f's corpus.
func seedLines(f *testing.F) {
	for _, n := range []string{"postfix-classic.log", "postfix-rfc3339.log", "exim-mainlog"} {
		data, err := os.ReadFile(filepath.Join(fixtures, n))
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			f.Add(l)
		}
	}
}

// FuzzSyslogLine checks that no syslog line makes the parsers panic and
// that what they accept is well-formed.
func FuzzSyslogLine(f *testing.F) {
	seedLines(f)
	f.Add("<22>Nov 23 13:33:57 h p[1]: ABCDE: to=<>")
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseSyslogLine(s, time.UTC)
		if err != nil {
			return
		}
		if l.Host == "" || strings.ContainsAny(l.Host, " ") || l.Program == "" || strings.ContainsAny(l.Program, " \t[") {
			t.Fatalf("accepted a malformed line %q: %+v", s, l)
		}
		r, err := ParsePostfix(l.Msg)
		if err != nil {
			return
		}
		switch r.Kind {
		case KindClient:
			if r.ClientAddress == "" {
				t.Fatalf("client without an address: %q", s)
			}
		case KindFrom:
			if r.Size < 0 || r.NRcpt < 0 {
				t.Fatalf("negative size or nrcpt: %q", s)
			}
		}
		if r.Kind != KindNoQueue && !ValidQueueID(r.QueueID) {
			t.Fatalf("bad queue ID %q from %q", r.QueueID, s)
		}
	})
}

// FuzzEximLine does the same for Exim's mainlog lines.
func FuzzEximLine(f *testing.F) {
	seedLines(f)
	f.Fuzz(func(t *testing.T, s string) {
		_, r, err := ParseExim(s, time.UTC)
		if err != nil {
			return
		}
		if !ValidQueueID(r.QueueID) || r.Size < 0 {
			t.Fatalf("accepted %q: %+v", s, r)
		}
		if r.Kind == KindTo && r.Recipient == "" {
			t.Fatalf("recipient line without a recipient: %q", s)
		}
	})
}

// FuzzReader feeds whole logs to a Reader: it never fails on content,
// and every message it returns was queued and has a queue ID.
func FuzzReader(f *testing.F) {
	for _, n := range []string{"postfix-classic.log", "postfix-rfc3339.log", "exim-mainlog"} {
		data, err := os.ReadFile(filepath.Join(fixtures, n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	end := time.Date(2027, 1, 2, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(Options{Location: time.UTC, End: end})
		if err := r.Read("fuzz", bytes.NewReader(data), end); err != nil && !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) {
			t.Fatalf("Read: %v", err)
		}
		for _, m := range r.Messages() {
			if m.QueueID == "" || m.Queued.IsZero() || m.Received.IsZero() {
				t.Fatalf("incomplete message %+v", m)
			}
			tr := Trace([]Message{m})
			if len(tr.Entries) != len(m.Recipients)+1+len(m.Outcomes) {
				t.Fatalf("%d entries for %d recipients", len(tr.Entries), len(m.Recipients))
			}
		}
	})
}
