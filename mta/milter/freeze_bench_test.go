package milter

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// storeQuarantine keeps frozen messages in a real quarantine.Store (BoltDB,
// each freeze one committed, fsync'd transaction), as the daemon does.
type storeQuarantine struct{ s *quarantine.Store }

func (q storeQuarantine) Freeze(_ context.Context, m *Message, d policy.Decision) (string, error) {
	r, err := q.s.RecordFreeze(&quarantine.Entry{Limit: d.Limit, Key: d.Key, Sender: m.Request.Sender,
		Recipients: m.Recipients, QueueID: m.Request.QueueID}, m.Body)
	return r.ID, err
}

func (q storeQuarantine) Hold(_ context.Context, m *Message, d policy.Decision) policy.Decision {
	if _, err := q.s.RecordHold(&quarantine.Entry{Limit: d.Limit, Key: d.Key, Sender: m.Request.Sender, QueueID: m.Request.QueueID}, false); err != nil {
		return policy.Decision{Action: policy.Defer, Fault: err}
	}
	return d
}

// freezingServer is a Server that freezes every message at its end into
// qs, keyed by the SASL login, logging warnings and errors only.
// openQuarantine returns a quarantine in a new state file at path, closed
// at the end of the test.
func openQuarantine(tb testing.TB, path string) *quarantine.Store {
	tb.Helper()
	db, err := statedb.Open(path, false, 0)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	qs, err := quarantine.New(db, quarantine.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	return qs
}

func freezingServer(qs *quarantine.Store) *Server {
	return &Server{
		Decider: mta.DeciderFunc(func(_ context.Context, req *policy.Request) policy.Decision {
			if req.ProtocolState == policy.StateEndOfMessage {
				return policy.Decision{Action: policy.Freeze, Limit: "mua", Key: req.SASLUsername}
			}
			return policy.Decision{}
		}),
		Quarantine: storeQuarantine{qs},
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

// BenchmarkFreeze100K is one frozen 100 KB message over a real milter
// session on a unix socket, as Postfix sends it (MAIL, RCPT, headers, the
// body in 64 KiB chunks, end of message): from the end of message to the
// discard reply, which the server sends only once the message is committed
// to the quarantine (BoltDB, fsync'd). It reports the median and p99 of
// that time (the session's other steps are not timed).
func BenchmarkFreeze100K(b *testing.B) {
	qs := openQuarantine(b, filepath.Join(b.TempDir(), "ratelimitd.db"))
	srv := freezingServer(qs)
	l, err := net.Listen("unix", filepath.Join(b.TempDir(), "milter.sock"))
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	c := gomilter.NewClientWithOptions("unix", l.Addr().String(), gomilter.ClientOptions{
		Dialer: &net.Dialer{Timeout: 5 * time.Second}, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
		ActionMask: gomilter.OptAddHeader | gomilter.OptQuarantine,
	})
	body := bytes.Repeat([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd\r\n"), 100<<10/64)
	must := func(act *gomilter.Action, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if act != nil && act.Code != gomilter.ActContinue {
			b.Fatalf("action %q, want continue", act.Code)
		}
	}
	var took []time.Duration
	b.SetBytes(int64(len(body)))
	msgNo := 0
	for b.Loop() {
		msgNo++
		s, err := c.Session()
		if err != nil {
			b.Fatal(err)
		}
		must(s.Conn("client.example.com", gomilter.FamilyInet, 41000, "192.0.2.7"))
		must(s.Helo("client.example.com"))
		if err := s.Macros(gomilter.CodeMail, "{auth_authen}", "alice", "{mail_addr}", "alice@example.com"); err != nil {
			b.Fatal(err)
		}
		must(s.Mail("alice@example.com", nil))
		must(s.Rcpt("bob@example.org", nil))
		must(s.HeaderField("Subject", "newsletter"))
		must(s.HeaderEnd())
		for chunk := body; len(chunk) > 0; {
			n := min(len(chunk), gomilter.MaxBodyChunk)
			must(s.BodyChunk(chunk[:n]))
			chunk = chunk[n:]
		}
		// One queue ID per message: the quarantine refuses a second.
		if err := s.Macros(gomilter.CodeEOB, "i", fmt.Sprintf("4D6F2C%05X", msgNo)); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		_, act, err := s.End()
		took = append(took, time.Since(start))
		if err != nil || act.Code != gomilter.ActDiscard {
			b.Fatalf("end: %v %v, want discard", act, err)
		}
		s.Close()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100])/1e6, "p99-ms")
}
