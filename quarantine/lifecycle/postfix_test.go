//go:build integration

package lifecycle

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// startHoldingPostfix starts a real private Postfix that puts every
// message on hold (check_sender_access static:HOLD) and relays to sink,
// with queue runs an hour apart: a message released from the hold queue
// is delivered soon only if someone schedules it (postqueue -i).
func startHoldingPostfix(t *testing.T, sink *mtatest.Sink) *mtatest.Postfix {
	t.Helper()
	return mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), ExtraMainCF: map[string]string{
		"smtpd_end_of_data_restrictions": "check_sender_access static:HOLD",
		"queue_run_delay":                "3600s",
		"minimal_backoff_time":           "3600s",
		"maximal_backoff_time":           "3600s",
	}})
}

// sendHeld sends n messages from user through pf and waits until all are
// in the hold queue; it returns their queue IDs, oldest first.
func sendHeld(t *testing.T, pf *mtatest.Postfix, user string, n int) []string {
	t.Helper()
	for i := range n {
		from := user + "@example.org"
		if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: user, ClientAddr: "192.0.2.7", From: from, To: []string{"rcpt@example.net"},
			Data: mtatest.BuildMessage(from, "rcpt@example.net", fmt.Sprintf("held %02d", i), "hello\n")}); err != nil {
			t.Fatal(err)
		}
	}
	_, held := pf.WaitQueue(t, 30*time.Second, func(_, held []string) bool { return len(held) == n })
	if len(held) != n {
		t.Fatalf("%d held, want %d", len(held), n)
	}
	byArrival := map[string]int64{}
	for _, q := range pf.Queue(t) {
		byArrival[q.QueueID] = q.ArrivalTime
	}
	slices.SortFunc(held, func(a, b string) int { // by arrival, then ID
		return cmp.Or(cmp.Compare(byArrival[a], byArrival[b]), strings.Compare(a, b))
	})
	return held
}

// postfixCommands are the default release commands (postsuper -H, then
// postqueue -i) pointed at a private instance.
func postfixCommands(pf *mtatest.Postfix) [][]string {
	return [][]string{{"postsuper", "-c", pf.ConfigDir(), "-H", "{queue_id}"}, {"postqueue", "-c", pf.ConfigDir(), "-i", "{queue_id}"}}
}

// listPostfix is the queue list command (postqueue -j) of a private
// instance.
func listPostfix(pf *mtatest.Postfix) []string {
	return []string{"postqueue", "-c", pf.ConfigDir(), "-j"}
}

// TestThawHeldSchedulesDelivery: the default release of
// held mail is postsuper -H followed by postqueue -i, so a thawed message
// is delivered now rather than at the next queue run (an hour here).
func TestThawHeldSchedulesDelivery(t *testing.T) {
	sink := mtatest.StartSink(t)
	pf := startHoldingPostfix(t, sink)
	ids := sendHeld(t, pf, "alice", 1)
	e := newEnv(t, Options{Queue: &postfix.Queue{ReleaseCommands: postfixCommands(pf), ListCommand: listPostfix(pf)}})
	id, err := e.svc.Record(context.Background(), Message{Request: &policy.Request{Sender: "alice@example.org", QueueID: ids[0]}, Recipients: []string{"rcpt@example.net"}},
		&policy.Decision{Action: policy.Hold, Limit: "tenhold", Key: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.svc.Thaw(context.Background(), Selection{IDs: []string{id}, By: "root"})
	if err != nil || len(out) != 1 || !out[0].OK || out[0].Note != "" {
		t.Fatalf("thaw: %+v %v", out, err)
	}
	msgs := sink.WaitCount(t, 1, 30*time.Second)
	if msgs[0].Header("Subject") != "held 00" {
		t.Fatalf("delivered %q", msgs[0].Header("Subject"))
	}
	pf.WaitQueueEmpty(t, 30*time.Second)
}

// TestExpireHeldReturnsToSender: held mail past max_age
// is returned to its sender by the default expire commands (postsuper -f,
// postqueue -i) in a real Postfix: Postfix's own bounce from <> reaches
// the sender (relayed to the sink) and the message leaves the hold queue.
func TestExpireHeldReturnsToSender(t *testing.T) {
	sink := mtatest.StartSink(t)
	pf := startHoldingPostfix(t, sink)
	ids := sendHeld(t, pf, "alice", 1)
	// The entry is recorded when the message arrived: the queue listing
	// confirms the queue ID by arrival time.
	clk := &clock{time.Now()}
	e := newEnv(t, Options{Now: clk.now, MaxAge: time.Hour, Queue: &postfix.Queue{ExpireCommands: [][]string{
		{"postsuper", "-c", pf.ConfigDir(), "-f", "{queue_id}"}, {"postqueue", "-c", pf.ConfigDir(), "-i", "{queue_id}"}},
		ListCommand: listPostfix(pf)}})
	e.hold(t, ids[0])
	clk.t = clk.t.Add(2 * time.Hour)
	if r := e.expire(clk.t); r.Bounced != 1 || r.Kept != 0 {
		t.Fatalf("expire: %+v\n%s", r, e.logs.String())
	}
	msgs := sink.WaitCount(t, 1, 30*time.Second)
	if msgs[0].From != "" || len(msgs[0].To) != 1 || msgs[0].To[0] != "alice@example.org" {
		t.Fatalf("bounce envelope %q -> %v", msgs[0].From, msgs[0].To)
	}
	pf.WaitQueueEmpty(t, 30*time.Second)
}

// TestThawRecordsPostfixQueueID: a frozen message thawed through a real
// Postfix's re-injection smtpd records the queue ID Postfix answered
// ("250 2.0.0 Ok: queued as ...") in the entry, the event and the
// outcome, and Postfix delivers the message under that queue ID.
func TestThawRecordsPostfixQueueID(t *testing.T) {
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), ReinjectPort: true})
	e := newEnv(t, Options{Reinjector: reinjector(pf.ReinjectAddr)})
	ids := e.freeze(t, "alice@example.org", 3)
	out, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "root"})
	if err != nil || len(out) != 3 {
		t.Fatalf("thaw: %+v %v", out, err)
	}
	sink.WaitCount(t, 3, 60*time.Second)
	seen := map[string]bool{}
	for i, id := range ids {
		got, err := e.q.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if !out[i].OK || got.State != quarantine.Thawed || got.ThawedTo != pf.ReinjectAddr || !quarantine.ValidQueueID(got.ThawedAs) || seen[got.ThawedAs] {
			t.Fatalf("entry %s after thaw: %+v (outcome %+v)", id, got, out[i])
		}
		seen[got.ThawedAs] = true
		if !strings.Contains(out[i].Note, "queued as "+got.ThawedAs) {
			t.Errorf("outcome note %q lacks queued as %s", out[i].Note, got.ThawedAs)
		}
		pf.WaitLog(t, got.ThawedAs+": to=<rcpt@example.net>", 30*time.Second)
	}
	e.ev.mu.Lock()
	defer e.ev.mu.Unlock()
	thawed := 0
	for _, ev := range e.ev.evs {
		if ev.Kind == Thawed {
			thawed++
			if !seen[ev.Entry.ThawedAs] || !strings.Contains(ev.Detail, "queued as "+ev.Entry.ThawedAs) {
				t.Errorf("thaw event %+v lacks the new queue ID", ev)
			}
		}
	}
	if thawed != 3 {
		t.Errorf("%d thaw events, want 3", thawed)
	}
}

// TestThawAgainAfterWrongListener: a thaw whose re-injection reached the
// wrong listener (an SMTP sink on another port, which answered 250) is
// repeated from the kept body once reinject_addr is fixed: Postfix then
// delivers it once, and the entry names Postfix's queue ID.
func TestThawAgainAfterWrongListener(t *testing.T) {
	wrong, sink := mtatest.StartSink(t), mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), ReinjectPort: true})
	r := reinjector(wrong.Addr())
	e := newEnv(t, Options{Reinjector: r, KeepThawed: time.Hour})
	ids := e.freeze(t, "alice@example.org", 3)
	if out, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, By: "root"}); err != nil || len(out) != 3 || !out[2].OK {
		t.Fatalf("thaw: %+v %v", out, err)
	}
	wrong.WaitCount(t, 3, 30*time.Second)
	if out, _ := e.svc.Thaw(context.Background(), Selection{IDs: ids[:1], By: "root"}); len(out) != 1 || out[0].OK {
		t.Fatalf("a plain second thaw must not send again: %+v", out)
	}
	r.Addr = pf.ReinjectAddr
	out, err := e.svc.Thaw(context.Background(), Selection{IDs: ids, Again: true, By: "root"})
	if err != nil || len(out) != 3 || !out[0].OK || !out[1].OK || !out[2].OK || !strings.HasPrefix(out[0].Note, "again: re-injected to "+pf.ReinjectAddr) {
		t.Fatalf("thaw --again: %+v %v\n%s", out, err, e.logs.String())
	}
	msgs := sink.WaitCount(t, 3, 60*time.Second)
	pf.WaitQueueEmpty(t, 30*time.Second)
	subjects := map[string]int{}
	for _, m := range sink.Messages() {
		subjects[m.Header("Subject")]++
	}
	if len(msgs) != 3 || len(subjects) != 3 {
		t.Fatalf("delivered %v, want each of 3 once", subjects)
	}
	for _, id := range ids {
		got, _ := e.q.Get(id)
		if got.State != quarantine.Thawed || got.ThawedTo != pf.ReinjectAddr || !quarantine.ValidQueueID(got.ThawedAs) || got.Attempts < 2 {
			t.Errorf("entry after the repeat: %+v", got)
		}
	}
	if wrong.Count() != 3 {
		t.Errorf("the wrong listener got %d messages, want 3", wrong.Count())
	}
}
