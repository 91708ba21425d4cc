package milter

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// advisingDecider is a fakeDecider that is also a FreezeAdvisor.
type advisingDecider struct {
	*fakeDecider
	may  bool
	mu   sync.Mutex
	asks []policy.Request
}

func (a *advisingDecider) MayFreeze(_ context.Context, req *policy.Request) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asks = append(a.asks, *req)
	return a.may
}

func (a *advisingDecider) asked() []policy.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]policy.Request(nil), a.asks...)
}

// spoolFiles lists this process's open files in dir (spool files are
// unlinked, so they show only here).
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, dir+"/") {
			out = append(out, l)
		}
	}
	return out
}

// TestFreezeAdvisor: a message no freeze could apply to is not kept; if it
// must be frozen all the same, it is temp-failed, never discarded.
func TestFreezeAdvisor(t *testing.T) {
	freezeAt := func(state string) func(*policy.Request) policy.Decision {
		return func(req *policy.Request) policy.Decision {
			if req.ProtocolState == state {
				return policy.Decision{Action: policy.Freeze, Limit: "mua"}
			}
			return policy.Decision{}
		}
	}
	t.Run("pass", func(t *testing.T) {
		dec := &advisingDecider{fakeDecider: &fakeDecider{}}
		env := start(t, "tcp", &Server{Decider: dec})
		s := env.session(t)
		connect(t, s)
		_, _, act := transaction(t, s, "alice@example.com", []string{"bob@example.org", "carol@example.org"}, richMsg, "Q1")
		if act.Code != gomilter.ActAccept {
			t.Fatalf("end: %q", act.Code)
		}
		asks := dec.asked()
		if len(asks) != 1 || asks[0].ProtocolState != policy.StateData || asks[0].RecipientCount != 2 ||
			asks[0].SASLUsername != "alice" || asks[0].Sender != "alice@example.com" || asks[0].Stage != policy.ViaMilter {
			t.Fatalf("MayFreeze asked %d times: %+v", len(asks), asks)
		}
		if eom := dec.eom(); len(eom) != 1 || eom[0].Size != int64(len(richMsg.want())) {
			t.Fatalf("END-OF-MESSAGE size not counted in full: %+v", eom)
		}
	})
	t.Run("freeze-not-kept", func(t *testing.T) {
		dec := &advisingDecider{fakeDecider: &fakeDecider{rule: freezeAt(policy.StateEndOfMessage)}}
		env := start(t, "tcp", &Server{Decider: dec})
		s := env.session(t)
		connect(t, s)
		_, _, act := transaction(t, s, "alice@example.com", []string{"bob@example.org"}, richMsg, "Q2")
		if act.Code != gomilter.ActReplyCode || act.SMTPCode != 451 || act.SMTPText != "4.3.0 "+textFreezeFault {
			t.Fatalf("end: %q %d %q, want 451 4.3.0", act.Code, act.SMTPCode, act.SMTPText)
		}
		if frozen, _ := env.q.snapshot(); len(frozen) != 0 {
			t.Fatalf("%d frozen", len(frozen))
		}
		if env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultFreeze] }) != 1 {
			t.Error("freeze fault not counted")
		}
	})
	t.Run("rcpt-freeze-keeps", func(t *testing.T) {
		dec := &advisingDecider{fakeDecider: &fakeDecider{rule: freezeAt(policy.StateRcpt)}}
		env := start(t, "tcp", &Server{Decider: dec})
		s := env.session(t)
		connect(t, s)
		_, _, act := transaction(t, s, "alice@example.com", []string{"bob@example.org"}, richMsg, "Q3")
		if act.Code != gomilter.ActDiscard {
			t.Fatalf("end: %q, want discard", act.Code)
		}
		frozen, _ := env.q.snapshot()
		if len(frozen) != 1 || !bytes.Equal(frozen[0].data, richMsg.want()) {
			t.Fatalf("frozen %d, data differs", len(frozen))
		}
		if n := len(dec.asked()); n != 0 {
			t.Fatalf("MayFreeze asked %d times after a RCPT freeze", n)
		}
	})
}

// A kept message larger than SpoolThreshold lives in an unlinked file in
// SpoolDir, not in memory, and is frozen byte-identical from it.
func TestSpoolLargeMessage(t *testing.T) {
	dir := t.TempDir()
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Freeze}
		}
		return policy.Decision{}
	}}
	env := start(t, "unix", &Server{Decider: dec, SpoolDir: dir, SpoolThreshold: 1024})
	s := env.session(t)
	connect(t, s)
	if err := s.Macros(gomilter.CodeMail, "{auth_authen}", "alice"); err != nil {
		t.Fatal(err)
	}
	cont(t, "mail")(s.Mail("alice@example.com", nil))
	cont(t, "rcpt")(s.Rcpt("bob@example.org", nil))
	for _, h := range richMsg.headers {
		cont(t, "header")(s.HeaderField(h[0], h[1]))
	}
	cont(t, "eoh")(s.HeaderEnd())
	for _, c := range richMsg.body {
		cont(t, "body")(s.BodyChunk(c))
	}
	files := spoolFiles(t, dir)
	if len(files) != 1 || !strings.HasSuffix(files[0], "(deleted)") {
		t.Fatalf("spool files open during the message: %q, want one unlinked", files)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("spool directory has names: %v", ents)
	}
	if err := s.Macros(gomilter.CodeEOB, "i", "Q9"); err != nil {
		t.Fatal(err)
	}
	_, act, err := s.End()
	mustAct(t, "end", act, err, gomilter.ActDiscard)
	frozen, _ := env.q.snapshot()
	if len(frozen) != 1 || !bytes.Equal(frozen[0].data, richMsg.want()) {
		t.Fatalf("frozen %d; data differs from what was sent", len(frozen))
	}
	if files := spoolFiles(t, dir); len(files) != 0 {
		t.Fatalf("spool file still open after the message: %q", files)
	}
}

// A spool that cannot be written is a counted fault; the message is
// temp-failed if it must be frozen, never discarded.
func TestSpoolFailure(t *testing.T) {
	dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
		if req.ProtocolState == policy.StateEndOfMessage {
			return policy.Decision{Action: policy.Freeze}
		}
		return policy.Decision{}
	}}
	env := start(t, "tcp", &Server{Decider: dec, SpoolDir: filepath.Join(t.TempDir(), "missing"), SpoolThreshold: 1024})
	s := env.session(t)
	connect(t, s)
	_, _, act := transaction(t, s, "alice@example.com", []string{"bob@example.org"}, richMsg, "Q4")
	if act.Code != gomilter.ActReplyCode || act.SMTPCode != 451 {
		t.Fatalf("end: %q %d %q, want 451", act.Code, act.SMTPCode, act.SMTPText)
	}
	if env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultSpool] }) != 1 ||
		env.metrics.get(func(m *countMetrics) int { return m.faults[mta.FaultFreeze] }) != 1 {
		t.Error("spool and freeze faults not counted once each")
	}
}
