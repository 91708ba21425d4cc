package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestConcurrentThawDeliversOnce: two thaws of the same
// entries running at once (two operators, or an operator and automatic
// release) re-inject each message exactly once into a real SMTP sink.
func TestConcurrentThawDeliversOnce(t *testing.T) {
	sink := mtatest.StartSink(t)
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr())})
	ids := e.freeze(t, "alice@example.org", 20)
	var wg sync.WaitGroup
	results := make([][]Outcome, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[i], err = e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "operator"})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ok, busy := 0, 0
	for _, r := range results {
		for _, o := range r {
			switch {
			case o.OK:
				ok++
			case strings.Contains(o.Error, "being released or deleted right now") || strings.Contains(o.Error, "cannot claim"):
				busy++
			default:
				t.Errorf("unexpected outcome %+v", o)
			}
		}
	}
	msgs := sink.Messages()
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header("Subject")]++
	}
	for subj, n := range seen {
		if n != 1 {
			t.Errorf("%q re-injected %d times", subj, n)
		}
	}
	if ok != 20 || busy != 20 || len(msgs) != 20 {
		t.Fatalf("ok %d, refused %d, delivered %d; want 20, 20, 20", ok, busy, len(msgs))
	}
	if n := e.ev.kinds()[Thawed]; n != 20 {
		t.Fatalf("%d thawed events, want 20", n)
	}
}

// TestThawQuitFailureCountsAsDelivered: once the server
// answered 250 to the data, the message is delivered whatever happens to
// QUIT; the entry must be thawed, and a second thaw must not send it again.
func TestThawQuitFailureCountsAsDelivered(t *testing.T) {
	sink := mtatest.StartSink(t)
	sink.FailQuit(true)
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr())})
	ids := e.freeze(t, "alice@example.org", 1)
	out, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "operator"})
	if err != nil || len(out) != 1 || !out[0].OK {
		t.Fatalf("thaw with a failing QUIT: %+v %v", out, err)
	}
	sink.WaitCount(t, 1, 10*time.Second)
	out, _ = e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "operator"})
	if len(out) != 1 || out[0].OK {
		t.Fatalf("second thaw: %+v", out)
	}
	// go-smtp's server names no queue ID: the whole reply is recorded.
	if ent, _ := e.q.Get(ids[0]); ent.State != quarantine.Thawed || ent.ThawedTo != sink.Addr() || !strings.Contains(ent.ThawedAs, "OK: queued") {
		t.Fatalf("entry after thaw: %+v", ent)
	}
	if n := sink.Count(); n != 1 {
		t.Fatalf("sink has %d messages, want 1", n)
	}
}

// TestInterruptedThawNeedsForce: a claim left by a process that stopped
// mid-thaw means the message may have been delivered; a frozen entry is
// then sent again only with Force.
func TestInterruptedThawNeedsForce(t *testing.T) {
	sink := mtatest.StartSink(t)
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr())})
	ids := e.freeze(t, "alice@example.org", 1)
	if _, err := e.q.Claim(ids[0], "a-process-that-crashed", false, false); err != nil {
		t.Fatal(err)
	}
	out, _ := e.svc.Thaw(context.Background(), Selection{IDs: ids})
	if len(out) != 1 || out[0].OK || !strings.Contains(out[0].Error, "interrupted") {
		t.Fatalf("thaw of an interrupted entry: %+v", out)
	}
	out, _ = e.svc.Thaw(context.Background(), Selection{IDs: ids, Force: true})
	if len(out) != 1 || !out[0].OK {
		t.Fatalf("forced thaw: %+v", out)
	}
	sink.WaitCount(t, 1, 10*time.Second)
}

// TestPolicyHoldRefusesForgedQueueID: a queue ID not in MTA syntax is
// never stored; the hold is recorded without it, logged and counted,
// and a delete of such an entry runs no command.
func TestPolicyHoldRefusesForgedQueueID(t *testing.T) {
	e := newEnv(t, Options{Queue: &postfix.Queue{DeleteCommand: []string{"false", "{queue_id}"}}})
	for _, qid := range []string{"ALL", "-", "4F2A1; reboot"} {
		e.svc.Record(context.Background(), Message{Request: &policy.Request{QueueID: qid, Instance: "i-" + qid, Sender: "m@example.org"}}, &policy.Decision{Action: policy.Hold, Limit: "hold", Key: "mallory"})
	}
	es, err := e.q.List(quarantine.Filter{Key: "mallory"})
	if err != nil || len(es) != 3 {
		t.Fatalf("entries: %v %v", es, err)
	}
	for _, ent := range es {
		if ent.QueueID != "" {
			t.Fatalf("forged queue ID stored: %+v", ent)
		}
	}
	if !strings.Contains(e.logs.String(), "refusing a queue ID") {
		t.Fatalf("no log line:\n%s", e.logs.String())
	}
	out, err := e.svc.Delete(context.Background(), Selection{Key: "mallory", By: "root"})
	if err != nil || len(out) != 3 || !out[0].OK || !strings.Contains(out[0].Note, "no queue ID") {
		t.Fatalf("delete: %+v %v", out, err)
	}
	if err := checkQueueID("ALL"); err == nil {
		t.Fatal("checkQueueID let ALL through to the Queue")
	}
}

func TestEventsAndSuspend(t *testing.T) {
	e := newEnv(t, Options{})
	e.freeze(t, "a@example.org", 2)
	if _, err := e.svc.Delete(context.Background(), Selection{Key: "alice", By: "root"}); err != nil {
		t.Fatal(err)
	}
	if k := e.ev.kinds(); k[Quarantined] != 2 || k[Deleted] != 2 {
		t.Fatalf("events %v", k)
	}
	e.ev.mu.Lock()
	by := e.ev.evs[len(e.ev.evs)-1].By
	e.ev.mu.Unlock()
	if by != "root" {
		t.Fatalf("event by %q", by)
	}
	if _, err := e.svc.Suspend("alice", "root", false); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.svc.Suspend("alice", "root", true); !ok || err != nil {
		t.Fatalf("resume: %v %v", ok, err)
	}
	var nop Events = NopEvents{}
	nop.QuarantineEvent(context.Background(), Event{})
	if _, err := New(e.q, Options{ExpireAction: "shred"}); err == nil || errors.Is(err, nil) {
		t.Fatal("unknown expire action accepted")
	}
}

// TestThawHeaderTellsRecipientsOnly: the X-Ratelimitd-Thawed header a
// thawed message carries to every recipient names the quarantine entry
// and times, not the operator (user, uid, pid), key or limit.
func TestThawHeaderTellsRecipientsOnly(t *testing.T) {
	sink := mtatest.StartSink(t)
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr())})
	ids := e.freeze(t, "alice@example.org", 1)
	if out, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "root (uid 0, pid 21157)"}); err != nil || len(out) != 1 || !out[0].OK {
		t.Fatalf("thaw: %+v %v", out, err)
	}
	h := sink.WaitCount(t, 1, 10*time.Second)[0].Header("X-Ratelimitd-Thawed")
	if !strings.HasPrefix(h, "id="+ids[0]+"; frozen=") || !strings.Contains(h, "; thawed=") {
		t.Errorf("header %q lacks the entry and times", h)
	}
	for _, leak := range []string{"root", "uid", "pid", "by=", "alice", "key=", "tenfreeze"} {
		if strings.Contains(h, leak) {
			t.Errorf("header %q tells recipients %q", h, leak)
		}
	}
}

// TestThawedBodySweptAfterKeepThawed: a thawed message's body is kept for
// KeepThawed (show still has it, --again can send it), and Expire drops
// it after; --again is then refused and sends nothing.
func TestThawedBodySweptAfterKeepThawed(t *testing.T) {
	sink := mtatest.StartSink(t)
	clk := &clock{t0}
	e := newEnv(t, Options{Reinjector: reinjector(sink.Addr()), KeepThawed: time.Hour, Now: clk.now})
	ids := e.freeze(t, "alice@example.org", 2)
	if out, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "root"}); err != nil || len(out) != 2 || !out[1].OK {
		t.Fatalf("thaw: %+v %v", out, err)
	}
	clk.t = t0.Add(59 * time.Minute)
	e.svc.Expire(context.Background(), clk.t)
	if _, body, err := e.svc.Show(context.Background(), ids[0], true); err != nil || !bytes.Contains(body, []byte("message 00")) {
		t.Fatalf("show within keep_thawed: %q %v", body, err)
	}
	if out, _ := e.svc.Thaw(context.Background(), Selection{IDs: ids[:1], Again: true, By: "root"}); len(out) != 1 || !out[0].OK {
		t.Fatalf("thaw --again within keep_thawed: %+v", out)
	}
	sink.WaitCount(t, 3, 10*time.Second)
	// ids[0] was thawed again at 59m: its hour starts then.
	clk.t = t0.Add(61 * time.Minute)
	e.svc.Expire(context.Background(), clk.t)
	if _, body, err := e.svc.Show(context.Background(), ids[0], true); err != nil || body == nil {
		t.Fatalf("show of the message thawed again: %q %v", body, err)
	}
	if _, body, err := e.svc.Show(context.Background(), ids[1], true); err != nil || body != nil {
		t.Fatalf("show past keep_thawed: %q %v", body, err)
	}
	out, _ := e.svc.Thaw(context.Background(), Selection{IDs: ids[1:], Again: true, By: "root"})
	if len(out) != 1 || out[0].OK || !strings.Contains(out[0].Error, "swept") {
		t.Fatalf("thaw --again past keep_thawed: %+v", out)
	}
	clk.t = t0.Add(2 * time.Hour)
	e.svc.Expire(context.Background(), clk.t)
	if _, body, _ := e.svc.Show(context.Background(), ids[0], true); body != nil {
		t.Fatalf("show of ids[0] past keep_thawed: %q", body)
	}
	if n := sink.Count(); n != 3 {
		t.Fatalf("sink has %d messages, want 3", n)
	}
}

// TestFreezeKeepsReceivedTrace: a milter freeze stores the Received line
// the MTA wrote on its own copy (with ESMTPA for a SASL login), and
// client-chosen values (HELO) cannot fold it or add a field.
func TestFreezeKeepsReceivedTrace(t *testing.T) {
	e := newEnv(t, Options{ReportingMTA: "mx.example.org", Now: (&clock{t0}).now})
	msg := mtatest.BuildMessage("alice@example.org", "rcpt@example.net", "trace", "hello\n")
	req := &policy.Request{Sender: "alice@example.org", SASLUsername: "alice", SASLMethod: "PLAIN", HeloName: "evil\r\nBcc: x@example.com (",
		ClientName: "client.example.org", ClientAddress: "192.0.2.7", QueueID: "4XbY1z3kQ9z9"}
	id, err := e.svc.Record(context.Background(), Message{Request: req, Recipients: []string{"rcpt@example.net"}, Body: bytes.NewReader(msg)},
		&policy.Decision{Action: policy.Freeze, Limit: "tenfreeze", Key: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.q.Message(id)
	if err != nil {
		t.Fatal(err)
	}
	want := "Received: from evilBcc:x@example.com (client.example.org [192.0.2.7])\r\n\tby mx.example.org (ratelimitd, for the MTA) with ESMTPA id 4XbY1z3kQ9z9\r\n\tfor <rcpt@example.net>; Sun, 01 Mar 2026 12:00:00 +0000\r\n"
	if !bytes.HasPrefix(got, []byte(want)) || !bytes.HasSuffix(got, msg) {
		t.Fatalf("stored message:\n%q\nwant prefix\n%q", got[:min(len(got), 300)], want)
	}
}

// TestSameAddressUnquotesLocalPart: the MTA's queue may list a quoted
// local part the policy request gave unquoted, or the other way round.
func TestSameAddressUnquotesLocalPart(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`"a b"@example.org`, `a b@example.org`, true},
		{`"a\"b"@example.org`, `a"b@example.org`, true},
		{`"x"@[192.0.2.1]`, `X@[192.0.2.1]`, true},
		{`Alice@Example.org`, `alice@example.org`, true},
		{`"a b"@example.org`, `ab@example.org`, false},
		{`"unterminated@example.org`, `unterminated@example.org`, false},
	} {
		if got := sameAddress(c.a, c.b); got != c.same {
			t.Errorf("sameAddress(%q, %q) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
