package maillog

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// A message is finished by its "removed" ("Completed") line, a new message
// under its queue ID, the end of the logs, or going idle (idleQueued:
// past maximal_queue_lifetime). Finished messages wait reorderWindow past
// their Queued time, to come out in Queued order.
const (
	idleUnqueued  = time.Hour
	idleQueued    = 7 * 24 * time.Hour
	sweepEvery    = 10 * time.Minute
	reorderWindow = time.Hour
)

// joiner assembles messages from records in time order per host and hands
// on finished ones.
type joiner struct {
	open    map[qkey]*Message
	seq     int
	st      *Stats
	sweptAt time.Time // the last look for idle messages
	ready   readyHeap
	deliver func(*Message) error
	err     error
	senders map[string]struct{} // "user U" or "sender S" of the messages handed on
}

type qkey struct{ host, id string }

// finish moves the message open under k to the ready heap.
func (j *joiner) finish(k qkey) {
	if m := j.open[k]; m != nil {
		heap.Push(&j.ready, m)
		delete(j.open, k)
	}
}

// advance finishes idle messages and hands on those reorderWindow behind t.
func (j *joiner) advance(t time.Time) {
	if d := t.Sub(j.sweptAt); d >= sweepEvery || d < -sweepEvery {
		j.sweptAt = t
		for k, m := range j.open {
			idle := t.Sub(m.seen)
			if idle > idleQueued || idle > idleUnqueued && m.Queued.IsZero() {
				j.finish(k)
			}
		}
	}
	for len(j.ready) > 0 && j.err == nil && j.ready[0].Queued.Before(t.Add(-reorderWindow)) {
		j.hand(heap.Pop(&j.ready).(*Message))
	}
}

// flush finishes every open message and hands on all ready ones.
func (j *joiner) flush() {
	for k := range j.open {
		j.finish(k)
	}
	for len(j.ready) > 0 && j.err == nil {
		j.hand(heap.Pop(&j.ready).(*Message))
	}
}

// hand counts m and passes it on if the policy service was asked about it.
func (j *joiner) hand(m *Message) {
	st := j.st
	switch {
	case m.smtp && m.queued:
	case m.smtp && m.held && !m.rejected:
		st.Held++ // on hold, never released in these logs: still sent
	case m.rejected:
		st.Rejected++
		return
	case m.local || m.queued && !m.smtp && m.Received.IsZero():
		st.NotSMTP++ // pickup, or made by Postfix itself (bounces)
		return
	default:
		st.Incomplete++
		return
	}
	if m.Received.IsZero() {
		m.Received = m.Queued
	}
	st.Messages++
	st.Recipients += m.RecipientCount()
	st.Outcomes += len(m.Outcomes)
	sender := "sender " + strings.ToLower(m.Sender)
	if m.SASLUsername != "" {
		sender = "user " + strings.ToLower(m.SASLUsername)
	}
	j.senders[sender] = struct{}{}
	if st.Start.IsZero() || m.Queued.Before(st.Start) {
		st.Start = m.Queued
	}
	if m.Queued.After(st.End) {
		st.End = m.Queued
	}
	j.err = j.deliver(m)
}

// byQueued orders messages by Queued time, then by first line.
func byQueued(a, b *Message) int {
	return cmp.Or(a.Queued.Compare(b.Queued), cmp.Compare(a.seq, b.seq))
}

// readyHeap orders finished messages byQueued.
type readyHeap []*Message

func (h readyHeap) Len() int           { return len(h) }
func (h readyHeap) Less(a, b int) bool { return byQueued(h[a], h[b]) < 0 }
func (h readyHeap) Swap(a, b int)      { h[a], h[b] = h[b], h[a] }
func (h *readyHeap) Push(x any)        { *h = append(*h, x.(*Message)) }
func (h *readyHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}

// Each reads the logs again, oldest first, and calls fn with every finished
// message that arrived over SMTP and was queued or held; fn may keep it
// and its error stops Each. It fills Stats; an I/O error counts as an
// unparsable line. Call it once, after the last ReadFile.
func (r *Reader) Each(fn func(*Message) error) error {
	slices.SortStableFunc(r.sources, func(a, b *source) int { return a.first.Compare(b.first) })
	j := &joiner{open: map[qkey]*Message{}, st: &r.stats, deliver: fn, senders: map[string]struct{}{}}
	for _, src := range r.sources {
		if j.err == nil {
			if err := r.join(src, j); err != nil {
				r.unparsable(fmt.Sprintf("%s: %v", src.name, err))
			}
		}
		src.file.Close()
	}
	r.sources = nil
	if j.err == nil {
		j.flush()
	}
	r.stats.Senders = len(j.senders)
	return j.err
}

// StreamTrace writes the Entries of Each's messages to w as a JSON Lines
// trace, after a "# header" line unless header is empty. Unlike
// Trace(r.Messages()) it holds no messages: late-finished ones come out
// of order.
func (r *Reader) StreamTrace(w io.Writer, header string) error {
	bw := bufio.NewWriter(w)
	if header != "" {
		bw.WriteString("# " + header + "\n")
	}
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	err := r.Each(func(m *Message) error {
		for _, e := range m.Entries() {
			if err := enc.Encode(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}
