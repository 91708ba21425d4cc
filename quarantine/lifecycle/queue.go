package lifecycle

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// Queue is the MTA's queue of held mail (postfix.Queue); queueID is always
// valid. Safe for concurrent use; ctx bounds each call.
type Queue interface {
	// Release releases the held message (postsuper -H, postqueue -i);
	// warnings are follow-up steps that failed after it was.
	Release(ctx context.Context, queueID string) (warnings []error, err error)
	// Expire returns it to its sender (postsuper -f), as Release.
	Expire(ctx context.Context, queueID string) (warnings []error, err error)
	// Delete removes it (postsuper -d).
	Delete(ctx context.Context, queueID string) error
	// Show prints it (postcat -q).
	Show(ctx context.Context, queueID string) ([]byte, error)
	// List lists the queue (postqueue -j, exim -bp);
	// quarantine.ErrNoQueueList when it cannot.
	List(ctx context.Context) ([]quarantine.QueuedMessage, error)
}

type noQueue struct{}

var errNoQueue = errors.New("lifecycle: no MTA queue commands configured")

func (noQueue) Release(context.Context, string) ([]error, error) { return nil, errNoQueue }
func (noQueue) Expire(context.Context, string) ([]error, error)  { return nil, errNoQueue }
func (noQueue) Delete(context.Context, string) error             { return errNoQueue }
func (noQueue) Show(context.Context, string) ([]byte, error)     { return nil, errNoQueue }
func (noQueue) List(context.Context) ([]quarantine.QueuedMessage, error) {
	return nil, quarantine.ErrNoQueueList
}

// checkQueueID returns errNoQueueID or why queueID is invalid.
func checkQueueID(queueID string) error {
	if queueID == "" {
		return errNoQueueID
	}
	if !quarantine.ValidQueueID(queueID) {
		return fmt.Errorf("lifecycle: refusing to run a command with %q: not a Postfix or Exim queue ID", clip(queueID, 64))
	}
	return nil
}

func clip(s string, n int) string { return termsafe.Line(s[:min(len(s), n)]) }

// releaseHeld runs Queue.Release or Expire; warn joins failed follow-ups.
func (s *Service) releaseHeld(ctx context.Context, op string, release func(context.Context, string) ([]error, error), queueID string) (warn, err error) {
	if err := checkQueueID(queueID); err != nil {
		s.fail(op, err)
		return nil, err
	}
	warns, err := release(ctx, queueID)
	if err != nil {
		s.fail(op, err)
		return nil, err
	}
	for _, w := range warns {
		s.fail("schedule", w)
		s.log.Warn("a follow-up command failed; the message was released and waits for the MTA's next queue run",
			"queue_id", queueID, "err", w)
	}
	return errors.Join(warns...), nil
}

// errUnverified wraps every refusal of confirmHeld.
var errUnverified = errors.New("lifecycle: the MTA's hold queue does not confirm the queue ID; no command was run")

// confirmHeld returns held entry e with its queue ID confirmed in (or
// found from) the MTA's queue; errors wrap errUnverified.
func (s *Service) confirmHeld(ctx context.Context, e quarantine.Entry) (quarantine.Entry, error) {
	if e.State != quarantine.Held {
		return e, nil
	}
	msgs, err := s.queue.List(ctx)
	if err != nil {
		if !errors.Is(err, quarantine.ErrNoQueueList) {
			s.failed("queue_list", err, "listing the MTA's queue failed", "id", e.ID, "queue_id", e.QueueID)
		}
		if e.QueueID == "" {
			return e, nil // nothing to find it with: errNoQueueID follows
		}
		if errors.Is(err, quarantine.ErrNoQueueList) {
			s.fail("verify", err)
			s.log.Warn("refusing to act on a held message: its queue ID cannot be confirmed without a queue listing",
				"id", e.ID, "queue_id", e.QueueID, "err", err)
		}
		return e, fmt.Errorf("%w: %w", errUnverified, err)
	}
	if e.QueueID == "" {
		return s.linkQueued(e, msgs), nil
	}
	reason := fmt.Sprintf("queue ID %s is not in the MTA's queue", e.QueueID)
	if i := slices.IndexFunc(msgs, func(m quarantine.QueuedMessage) bool { return m.QueueID == e.QueueID }); i >= 0 {
		reason = mismatch(&msgs[i], e)
	}
	if reason != "" {
		reason = clip(reason, 400)
		s.fail("verify", errors.New(reason))
		s.log.Warn("refusing to act on a held message: the MTA's hold queue does not confirm its queue ID (forged policy request?)",
			"id", e.ID, "queue_id", e.QueueID, "sender", e.Sender, "key", e.Key, "reason", reason)
	}
	if e.Unverified != reason || reason != "" {
		if err := s.q.SetUnverified(e.ID, reason); err != nil {
			s.failed("store", err, "recording whether a held message's queue ID is confirmed failed", "id", e.ID)
		}
		e.Unverified = reason
	}
	if reason == "" {
		return e, nil
	}
	return e, fmt.Errorf("%w: %s", errUnverified, reason)
}

// queueWindowBefore and queueWindowAfter bound a held message's arrival
// around its entry's creation.
const (
	queueWindowBefore = time.Minute
	queueWindowAfter  = 30 * time.Minute
)

// linkQueued links held entry e without a queue ID to the closest matching
// unclaimed message of msgs and returns e as stored (callers check both).
func (s *Service) linkQueued(e quarantine.Entry, msgs []quarantine.QueuedMessage) quarantine.Entry {
	var cands []*quarantine.QueuedMessage
	for i := range msgs {
		if m := &msgs[i]; quarantine.ValidQueueID(m.QueueID) && mismatch(m, e) == "" {
			cands = append(cands, m)
		}
	}
	dist := func(m *quarantine.QueuedMessage) time.Duration { return m.Arrival.Sub(e.Created).Abs() }
	slices.SortStableFunc(cands, func(a, b *quarantine.QueuedMessage) int { return cmp.Compare(dist(a), dist(b)) })
	for _, m := range cands {
		switch err := s.q.LinkQueueID(e.ID, m.QueueID); {
		case err == nil:
			s.log.Info("held message found in the MTA's hold queue", "id", e.ID, "queue_id", m.QueueID)
			e.QueueID = m.QueueID
			return e
		case !errors.Is(err, quarantine.ErrState):
			s.failed("store", err, "recording the queue ID of a held message failed", "id", e.ID)
			return e
		}
	}
	return e
}

// mismatch says why queued m is not e's, or "" when on hold with e's
// sender and recipients within the window around e.Created.
func mismatch(m *quarantine.QueuedMessage, e quarantine.Entry) string {
	switch {
	case m.Queue != "hold":
		return fmt.Sprintf("the message is in the MTA's %s queue, not on hold", m.Queue)
	case !sameAddress(m.Sender, e.Sender):
		return fmt.Sprintf("the queued message is from <%s>, the entry from <%s>", m.Sender, e.Sender)
	case !hasRecipients(m, e.Recipients):
		return fmt.Sprintf("the queued message is to %s, the entry to %s", strings.Join(m.Recipients, ", "), strings.Join(e.Recipients, ", "))
	case m.Arrival.Before(e.Created.Add(-queueWindowBefore)) || m.Arrival.After(e.Created.Add(queueWindowAfter)):
		return fmt.Sprintf("the queued message arrived at %s, the entry was recorded at %s",
			m.Arrival.UTC().Format(time.RFC3339), e.Created.UTC().Format(time.RFC3339))
	}
	return ""
}

func hasRecipients(m *quarantine.QueuedMessage, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(m.Recipients, func(r string) bool { return sameAddress(r, w) }) {
			return false
		}
	}
	return true
}

// sameAddress compares addresses case-insensitively, quoted local parts
// unquoted (RFC 5321 4.1.2, net/mail).
func sameAddress(a, b string) bool {
	unquote := func(addr string) string {
		if p, err := mail.ParseAddress("<" + addr + ">"); err == nil && strings.HasPrefix(addr, `"`) {
			return p.Address
		}
		return addr
	}
	return strings.EqualFold(unquote(a), unquote(b))
}

const (
	maxIncomplete    = 10000 // held entries waiting to be completed
	completeAttempts = 12    // counted complete runs that look for a message
)

func (s *Service) noteIncomplete(id string) {
	s.mu.Lock()
	if _, ok := s.incomplete[id]; !ok && len(s.incomplete) < maxIncomplete {
		s.incomplete[id] = 0
	}
	s.mu.Unlock()
}

// noteIncompleteStored marks stored held entries lacking size or subject.
func (s *Service) noteIncompleteStored() {
	es, err := s.q.List(quarantine.Filter{States: []quarantine.State{quarantine.Held}})
	if err != nil {
		s.fail("list", err)
		return
	}
	for _, e := range es {
		if e.Size == 0 || e.Subject == "" {
			s.noteIncomplete(e.ID)
		}
	}
}

// completeNow completes the waiting held entries before a listing.
func (s *Service) completeNow() {
	s.mu.Lock()
	n := len(s.incomplete)
	s.mu.Unlock()
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a listing waits no longer
	defer cancel()
	s.complete(ctx, false)
}

// complete fills recently held entries from the MTA's queue, for up to
// completeAttempts runs that count (a failed listing is then logged), one
// call at a time; it returns how many it completed.
func (s *Service) complete(ctx context.Context, count bool) (completed int) {
	s.completeMu.Lock()
	defer s.completeMu.Unlock()
	s.mu.Lock()
	ids := slices.Sorted(maps.Keys(s.incomplete))
	s.mu.Unlock()
	if len(ids) == 0 {
		return 0
	}
	msgs, err := s.queue.List(ctx)
	if errors.Is(err, quarantine.ErrNoQueueList) {
		msgs, err = nil, nil // the queue files are still shown (Queue.Show)
	}
	if err != nil {
		if count { // a listing's completion leaves reporting to the periodic run
			s.failed("queue_list", err, "listing the MTA's queue to complete held messages failed")
		}
		return 0
	}
	for _, id := range ids {
		done := s.completeOne(ctx, id, msgs)
		s.mu.Lock()
		if done {
			delete(s.incomplete, id)
			completed++
		} else if count {
			if s.incomplete[id]++; s.incomplete[id] >= completeAttempts {
				delete(s.incomplete, id)
			}
		}
		s.mu.Unlock()
	}
	return completed
}

// completeOne completes held id from msgs (nil: header only); true: it is done.
func (s *Service) completeOne(ctx context.Context, id string, msgs []quarantine.QueuedMessage) bool {
	e, err := s.q.Get(id)
	if err != nil || e.State != quarantine.Held {
		return true // gone, released or deleted meanwhile
	}
	if e.QueueID == "" {
		if e = s.linkQueued(e, msgs); e.QueueID == "" {
			return false
		}
	}
	var d quarantine.HeldDetails
	if msgs != nil {
		i := slices.IndexFunc(msgs, func(m quarantine.QueuedMessage) bool { return m.QueueID == e.QueueID })
		if i < 0 {
			return false // not queued yet
		}
		d.Recipients, d.Size = msgs[i].Recipients, msgs[i].Size
	}
	if e.Subject == "" && checkQueueID(e.QueueID) == nil {
		out, err := s.queue.Show(ctx, e.QueueID)
		if err != nil {
			return false
		}
		d.Subject, d.MessageID = quarantine.HeaderInfo(messageContents(out))
	}
	err = s.q.CompleteHeld(id, d)
	if err != nil && !errors.Is(err, quarantine.ErrState) && !errors.Is(err, quarantine.ErrNotFound) {
		s.failed("store", err, "completing a held message's entry failed", "id", id)
		return false
	}
	return true
}

// messageContents returns what follows postcat's "*** MESSAGE CONTENTS".
func messageContents(out []byte) []byte {
	_, after, found := bytes.Cut(out, []byte("*** MESSAGE CONTENTS"))
	if !found {
		return out
	}
	_, body, _ := bytes.Cut(after, []byte("\n"))
	return body
}
