package lifecycle

import (
	"cmp"
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

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
		err := s.q.LinkQueueID(e.ID, m.QueueID)
		if err == nil {
			s.log.Info("held message found in the MTA's hold queue", "id", e.ID, "queue_id", m.QueueID)
			e.QueueID = m.QueueID
			return e
		}
		if !errors.Is(err, quarantine.ErrState) {
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
