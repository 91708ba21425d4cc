package lifecycle

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message"
	"github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func (e *env) hold(t *testing.T, qid string) string {
	t.Helper()
	id, err := e.svc.Record(context.Background(), Message{Request: &policy.Request{Sender: "alice@example.org", QueueID: qid}, Recipients: []string{"rcpt@example.net"}},
		&policy.Decision{Action: policy.Hold, Limit: "tenhold", Key: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestExpireBounceAndKeep: past max_age, a frozen
// message is returned to its sender with an RFC 3464 DSN (sent to a real
// SMTP sink), one from the null sender is deleted without a DSN, a held
// message is returned by the expire command, and every message that may
// still exist (no queue ID, a failed expire command, a failed DSN) keeps
// its record, flagged and logged.
func TestExpireBounceAndKeep(t *testing.T) {
	sink := mtatest.StartSink(t)
	clk := &clock{t0}
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr()), Now: clk.now, MaxAge: 24 * time.Hour,
		Queue:        &postfix.Queue{ExpireCommands: [][]string{{"true", "{queue_id}"}}, ListCommand: listCommand(map[string]time.Time{"4F2A12345": t0})},
		ReportingMTA: "mx.example.org"})
	frozen := e.freeze(t, "alice@example.org", 1)[0]
	null := e.freeze(t, "", 1)[0]
	heldOK := e.hold(t, "4F2A12345")
	clk.t = t0.Add(2 * time.Hour) // held later: 4F2A12345 is not its message
	heldNoID := e.hold(t, "")
	clk.t = t0.Add(27 * time.Hour)
	young := e.freeze(t, "alice@example.org", 1) // created now: not expired
	r := e.expire(clk.t)
	if r.Bounced != 2 || r.NullSender != 1 || r.Kept != 1 {
		t.Fatalf("expire report %+v, want 2 bounced, 1 null sender, 1 kept (none purged: below)", r)
	}
	for id, want := range map[string]quarantine.State{frozen: quarantine.Deleted, null: quarantine.Deleted,
		heldOK: quarantine.Deleted, heldNoID: quarantine.Held, young[0]: quarantine.Frozen} {
		ent, err := e.q.Get(id)
		if err != nil || ent.State != want {
			t.Errorf("%s: %v %v, want %s", id, ent.State, err, want)
		}
	}
	if ent, _ := e.q.Get(heldNoID); !strings.Contains(ent.Error, "past max_age") || !strings.Contains(ent.Error, "no MTA queue ID") {
		t.Errorf("kept entry not flagged: %q", ent.Error)
	}
	if !strings.Contains(e.logs.String(), "level=ERROR msg=\"quarantine expiry: message past max_age kept") {
		t.Errorf("no error logged:\n%s", e.logs.String())
	}
	sink.WaitCount(t, 1, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	msgs := sink.Messages()
	if len(msgs) != 1 {
		t.Fatalf("sink has %d messages, want one DSN", len(msgs))
	}
	dsn := msgs[0]
	if dsn.From != "" || len(dsn.To) != 1 || dsn.To[0] != "alice@example.org" {
		t.Fatalf("DSN envelope %q -> %v", dsn.From, dsn.To)
	}
	checkDSN(t, dsn.Data)
	if k := e.ev.kinds(); k[Expired] != 3 {
		t.Errorf("events %v", k)
	}

	// A DSN that cannot be sent keeps the frozen message, flagged.
	sink.SetReply(mtatest.StageRcpt, &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "later"})
	clk.t = t0.Add(52 * time.Hour)
	if r := e.expire(clk.t); r.Kept != 2 || r.Bounced != 0 {
		t.Fatalf("expire with a refusing sink: %+v", r)
	}
	if ent, _ := e.q.Get(young[0]); ent.State != quarantine.Frozen || !strings.Contains(ent.Error, "451") || ent.Claim != "" {
		t.Fatalf("frozen entry after a failed DSN: %+v", ent)
	}
}

func checkDSN(t *testing.T, data []byte) {
	t.Helper()
	m, err := message.Read(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, _ := m.Header.ContentType()
	if mt != "multipart/report" || params["report-type"] != "delivery-status" || m.Header.Get("Auto-Submitted") != "auto-replied" {
		t.Fatalf("DSN header: %s %v\n%s", mt, params, data)
	}
	var types []string
	var status string
	mr := m.MultipartReader()
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ct, _, _ := p.Header.ContentType()
		types = append(types, ct)
		b, _ := io.ReadAll(p.Body)
		if ct == "message/delivery-status" {
			status = string(b)
		}
	}
	if strings.Join(types, ",") != "text/plain,message/delivery-status,text/rfc822-headers" {
		t.Fatalf("DSN parts %v", types)
	}
	for _, want := range []string{"Reporting-MTA: dns; mx.example.org", "Final-Recipient: rfc822; rcpt@example.net",
		"Action: failed", "Status: 5.4.7"} {
		if !strings.Contains(status, want) {
			t.Fatalf("delivery-status lacks %q:\n%s", want, status)
		}
	}
}

// TestExpireKeep: expire_action = "keep" keeps and flags everything.
func TestExpireKeep(t *testing.T) {
	clk := &clock{t0}
	e := newEnv(t, Options{Now: clk.now, MaxAge: time.Hour, ExpireAction: ExpireKeep,
		Queue: &postfix.Queue{ExpireCommands: [][]string{{"true", "{queue_id}"}}}})
	f := e.freeze(t, "alice@example.org", 1)[0]
	h := e.hold(t, "4F2A12345")
	clk.t = t0.Add(2 * time.Hour)
	if r := e.expire(clk.t); r.Kept != 2 {
		t.Fatalf("report %+v", r)
	}
	for _, id := range []string{f, h} {
		if ent, _ := e.q.Get(id); !ent.State.Pending() || !strings.Contains(ent.Error, "expire_action = keep") {
			t.Fatalf("%s: %+v", id, ent)
		}
	}
}

// TestExpireHeldCommandFails: postsuper failed, so the message may still
// be in the queue: the record stays.
func TestExpireHeldCommandFails(t *testing.T) {
	clk := &clock{t0}
	e := newEnv(t, Options{Now: clk.now, MaxAge: time.Hour, Queue: &postfix.Queue{ExpireCommands: [][]string{{"false", "{queue_id}"}}}})
	h := e.hold(t, "4F2A12345")
	clk.t = t0.Add(2 * time.Hour)
	if r := e.expire(clk.t); r.Kept != 1 {
		t.Fatalf("report %+v", r)
	}
	if ent, err := e.q.Get(h); err != nil || ent.State != quarantine.Held || ent.Claim != "" {
		t.Fatalf("held entry after a failed expire command: %+v %v", ent, err)
	}
}
