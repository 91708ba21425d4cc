package maillog

import (
	"cmp"
	"container/heap"
	"fmt"
	"io"
	"os"
	"slices"
	"time"
)

// Streaming. Each hands on every message once it is finished, so memory
// is bounded by the messages open at a time (and those finished within
// reorderWindow of log time), not by the length of the logs:
//
//   - a message is finished by its "removed" line (Exim: "Completed"), by
//     a new message under its queue ID, by going idle (no line for
//     idleUnqueued before it was queued: an SMTP session that ended
//     before its message was complete, which Postfix does not log as
//     removed; no line for idleQueued after: longer than Postfix's
//     maximal_queue_lifetime of 5 days), or by the end of the logs;
//   - finished messages wait until the log has moved reorderWindow past
//     their Queued time, so they come out in Queued order unless one
//     finished later than that (a deferred message), which comes out at
//     once: out of order, as traces may be.

const (
	idleUnqueued  = time.Hour
	idleQueued    = 7 * 24 * time.Hour
	sweepEvery    = 10 * time.Minute
	reorderWindow = time.Hour
)

// joiner assembles messages from records fed in time order per host and
// hands on finished ones.
type joiner struct {
	open map[qkey]*Message
	seq  int
	st   *Stats
	// now is the time of the latest record, sweptAt that of the last
	// look for idle messages.
	now, sweptAt time.Time
	ready        readyHeap
	deliver      func(*Message) error
	err          error
	// senders are the distinct senders handed on (senderOf).
	senders map[string]struct{}
}

type qkey struct{ host, id string }

// finish moves the message open under k to the ready heap.
func (j *joiner) finish(k qkey) {
	if m := j.open[k]; m != nil {
		heap.Push(&j.ready, m)
		delete(j.open, k)
	}
}

// advance notes the time of the latest record, finishes idle messages and
// hands on the ready ones the log has left reorderWindow behind.
func (j *joiner) advance(t time.Time) {
	j.now = t
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

// hand counts m in Stats and passes it on if it is a message the policy
// service was asked about.
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
	j.senders[senderOf(m)] = struct{}{}
	if st.Start.IsZero() || m.Queued.Before(st.Start) {
		st.Start = m.Queued
	}
	if m.Queued.After(st.End) {
		st.End = m.Queued
	}
	j.err = j.deliver(m)
}

// readyHeap orders finished messages by Queued time, then by first line.
type readyHeap []*Message

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(a, b int) bool {
	if c := h[a].Queued.Compare(h[b].Queued); c != 0 {
		return c < 0
	}
	return h[a].seq < h[b].seq
}
func (h readyHeap) Swap(a, b int) { h[a], h[b] = h[b], h[a] }
func (h *readyHeap) Push(x any)   { *h = append(*h, x.(*Message)) }
func (h *readyHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}

// Each reads the logs again, oldest first, joins their lines and calls fn
// with every message that arrived over SMTP and was queued (or put on
// hold), as soon as the message is finished (see the streaming rules
// above): in order of Queued time, except for messages finished more than
// an hour of log time after they were queued. fn may keep the message.
// Each fills Stats. Call it once, after the last ReadFile or Read; an I/O
// error reading a log again is counted as an unparsable line, fn's error
// stops the reading and is returned.
func (r *Reader) Each(fn func(*Message) error) error {
	slices.SortStableFunc(r.sources, func(a, b *source) int {
		if a.first.IsZero() || b.first.IsZero() {
			return cmp.Compare(btoi(a.first.IsZero()), btoi(b.first.IsZero()))
		}
		return a.first.Compare(b.first)
	})
	j := &joiner{open: map[qkey]*Message{}, st: &r.stats, deliver: fn, senders: map[string]struct{}{}}
	for _, src := range r.sources {
		if j.err != nil {
			break
		}
		if err := r.join(src, j); err != nil {
			r.stats.Unparsable++
			if len(r.stats.Samples) < r.opts.MaxSamples {
				r.stats.Samples = append(r.stats.Samples, fmt.Sprintf("%s: %v", src.name, err))
			}
		}
	}
	for _, src := range r.sources {
		src.data = nil
		if src.spool != nil {
			src.spool.Close()
		}
	}
	r.sources = nil
	if j.err == nil {
		j.flush()
	}
	r.stats.Senders = len(j.senders)
	return j.err
}

// readSpooled copies in (standard input) to an unlinked temporary file,
// which both passes read, and dates it as of now (or Options.End).
func (r *Reader) readSpooled(name string, in io.Reader) error {
	f, err := os.CreateTemp("", "ratelimitd-maillog-*")
	if err != nil {
		return fmt.Errorf("maillog: %s: %w", name, err)
	}
	os.Remove(f.Name()) // the open file stays readable
	if _, err := io.Copy(f, in); err != nil {
		f.Close()
		return fmt.Errorf("maillog: %s: %w", name, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("maillog: %s: %w", name, err)
	}
	end := r.opts.End
	if end.IsZero() {
		end = time.Now()
	}
	return r.add(&source{name: name, spool: f}, f, end)
}

// StreamTrace writes the trace of the logs' messages to w as Each finds
// them, like WriteTrace(w, Trace(r.Messages()), header) without holding
// the messages: the trace is in Queued order but for messages finished late,
// which simulate.Read accepts (it replays in time order). It fills
// Stats.
func (r *Reader) StreamTrace(w io.Writer, header string) error {
	tw := newTraceWriter(w, header)
	err := r.Each(func(m *Message) error {
		for _, e := range m.Entries() {
			tw.entry(&e)
		}
		return tw.err
	})
	if err != nil {
		return err
	}
	return tw.flush()
}
