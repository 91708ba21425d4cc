package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// listQueue is a Queue whose listing and queue files the test sets.
type listQueue struct {
	noQueue
	mu    sync.Mutex
	msgs  []quarantine.QueuedMessage
	files map[string]string
	shown int
}

func (q *listQueue) List(context.Context) ([]quarantine.QueuedMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]quarantine.QueuedMessage{}, q.msgs...), nil
}

func (q *listQueue) Show(_ context.Context, id string) ([]byte, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.shown++
	f, ok := q.files[id]
	if !ok {
		return nil, fmt.Errorf("postcat: %s: no such queue file", id)
	}
	return []byte(f), nil
}

func (q *listQueue) queue(m quarantine.QueuedMessage, header string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.msgs = append(q.msgs, m)
	q.files[m.QueueID] = "*** ENVELOPE RECORDS hold/" + m.QueueID + " ***\nmessage_size: 100\n*** MESSAGE CONTENTS hold/" + m.QueueID +
		" ***\nReceived: from x\n" + header + "\nbody\n*** HEADER EXTRACTED hold/" + m.QueueID + " ***\n"
}

// TestHeldEntryCompletedFromQueue: a message held at its first RCPT is
// listed, once Postfix has queued it, with every recipient, its size and
// its subject, whether END-OF-MESSAGE brought its queue ID or the queue
// listing had to find it.
func TestHeldEntryCompletedFromQueue(t *testing.T) {
	q := &listQueue{files: map[string]string{}}
	e := newEnv(t, Options{Queue: q})
	ctx := context.Background()
	hold := &policy.Decision{Action: policy.Hold, Limit: "hourly", Key: "alice", Rate: 201, Max: 200}
	// Message 1: held at RCPT, linked at END-OF-MESSAGE (size 2000).
	e.svc.Record(ctx, Message{Request: &policy.Request{Instance: "i1", Sender: "alice@example.org", Recipient: "a@example.net",
		ProtocolState: policy.StateRcpt}}, hold)
	e.svc.Record(ctx, Message{Request: &policy.Request{Instance: "i1", QueueID: "4F2A1B3C4D", Sender: "alice@example.org", Size: 2000,
		RecipientCount: 2, ProtocolState: policy.StateEndOfMessage}}, &policy.Decision{})
	// Message 2: held at RCPT, no END-OF-MESSAGE request.
	e.svc.Record(ctx, Message{Request: &policy.Request{Instance: "i2", Sender: "alice@example.org", Recipient: "c@example.net",
		ProtocolState: policy.StateRcpt}}, hold)
	held := func() map[string]quarantine.Entry {
		es, err := e.q.List(quarantine.Filter{Key: "alice"})
		if err != nil || len(es) != 2 {
			t.Fatalf("entries %+v, %v", es, err)
		}
		m := map[string]quarantine.Entry{}
		for _, en := range es {
			m[en.Instance] = en
		}
		return m
	}
	if m := held(); m["i1"].Size != 2000 || m["i1"].QueueID != "4F2A1B3C4D" {
		t.Errorf("after END-OF-MESSAGE: %+v", m["i1"])
	}
	// Not queued yet: nothing to complete, tried again later.
	if n := e.svc.complete(ctx, true); n != 0 {
		t.Fatalf("completed %d before the messages were queued", n)
	}
	now := time.Now()
	q.queue(quarantine.QueuedMessage{Queue: "hold", QueueID: "4F2A1B3C4D", Arrival: now, Sender: "alice@example.org",
		Recipients: []string{"a@example.net", "B@example.net"}, Size: 2345}, "Subject: =?UTF-8?Q?Quarterly_r=C3=A9port?=\nMessage-ID: <q1@example.org>\n")
	q.queue(quarantine.QueuedMessage{Queue: "hold", QueueID: "5E6D7C8B9A", Arrival: now, Sender: "alice@example.org",
		Recipients: []string{"c@example.net", "d@example.net"}, Size: 999}, "Subject: hello\x1b[2J there\n")
	if n := e.svc.complete(ctx, true); n != 2 {
		t.Fatalf("completed %d, want 2", n)
	}
	m := held()
	if en := m["i1"]; fmt.Sprint(en.Recipients) != "[a@example.net B@example.net]" || en.Size != 2345 ||
		en.Subject != "Quarterly réport" || en.MessageID != "q1@example.org" {
		t.Errorf("message 1: %+v", en)
	}
	if en := m["i2"]; en.QueueID != "5E6D7C8B9A" || fmt.Sprint(en.Recipients) != "[c@example.net d@example.net]" || en.Size != 999 ||
		en.Subject != "hello\ufffd[2J there" {
		t.Errorf("message 2: %+v", en)
	}
	// Completed entries are not read again.
	shown := q.shown
	if n := e.svc.complete(ctx, true); n != 0 || q.shown != shown {
		t.Errorf("second run completed %d, read %d queue files", n, q.shown-shown)
	}
}

// TestHeldEntryGivenUpAfterAttempts: an entry whose message never shows
// up in the queue is looked for completeAttempts times, then left.
func TestHeldEntryGivenUpAfterAttempts(t *testing.T) {
	q := &listQueue{files: map[string]string{}}
	e := newEnv(t, Options{Queue: q})
	e.svc.Record(context.Background(), Message{Request: &policy.Request{Sender: "bob@example.org", Recipient: "x@example.net", QueueID: "4A4A4A4A4A"}}, &policy.Decision{Action: policy.Hold, Limit: "hourly", Key: "bob"})
	for range completeAttempts {
		e.svc.complete(context.Background(), true)
	}
	e.svc.mu.Lock()
	n := len(e.svc.incomplete)
	e.svc.mu.Unlock()
	if n != 0 {
		t.Errorf("%d entries still waiting after %d attempts", n, completeAttempts)
	}
}
