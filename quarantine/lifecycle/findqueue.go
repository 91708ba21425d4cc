package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// A message held at its first RCPT has no queue ID in its record: Postfix
// asks smtpd_recipient_restrictions before it opens the queue file
// (smtpd_delay_open_until_valid_rcpt), and with the policy service in
// smtpd_recipient_restrictions only, no later request of a one-recipient
// message brings the ID. findQueueID finds it in the hold queue listing
// (postqueue -j, Postfix 3.1 and later: one JSON object per queued
// message, postqueue(1)) by the envelope and arrival time, before the
// entry is released, deleted or expired.

// queueWindowBefore and queueWindowAfter bound a held message's arrival
// time around its record's creation (the hold is decided at RCPT, the
// queue file is created right after it; DATA may take long).
const (
	queueWindowBefore = time.Minute
	queueWindowAfter  = 30 * time.Minute
)

// findQueueID links held entry e to its message in the MTA's hold queue
// when it has no queue ID, and returns the entry as stored. When the
// Queue lists nothing (it cannot list), or no queued message matches, e
// is returned unchanged (the caller then reports errNoQueueID). A message matches when
// it is in the hold queue, has e's sender and every one of e's recipients,
// arrived within the window around e.Created, and no other pending entry
// names it (quarantine.Store.LinkQueueID refuses that); the closest
// arrival wins.
func (s *Service) findQueueID(ctx context.Context, e quarantine.Entry) quarantine.Entry {
	if e.State != quarantine.Held || e.QueueID != "" {
		return e
	}
	msgs, err := s.queue.List(ctx)
	if err != nil {
		s.fail("queue_list", err)
		s.log.Error("listing the MTA's queue to find a held message failed", "id", e.ID, "err", err)
		return e
	}
	return s.linkQueued(e, msgs)
}

// linkQueued is findQueueID on the queue listing msgs.
func (s *Service) linkQueued(e quarantine.Entry, msgs []quarantine.QueuedMessage) quarantine.Entry {
	if e.State != quarantine.Held || e.QueueID != "" {
		return e
	}
	var cands []*quarantine.QueuedMessage
	for i := range msgs {
		m := &msgs[i]
		if m.Queue != "hold" || !quarantine.ValidQueueID(m.QueueID) || !strings.EqualFold(m.Sender, e.Sender) ||
			!hasRecipients(m, e.Recipients) {
			continue
		}
		if arrived := m.Arrival; arrived.Before(e.Created.Add(-queueWindowBefore)) || arrived.After(e.Created.Add(queueWindowAfter)) {
			continue
		}
		cands = append(cands, m)
	}
	dist := func(m *quarantine.QueuedMessage) time.Duration { return m.Arrival.Sub(e.Created).Abs() }
	slices.SortStableFunc(cands, func(a, b *quarantine.QueuedMessage) int { return cmp.Compare(dist(a), dist(b)) })
	// The closest match may already belong to another entry (two held
	// messages of one envelope): LinkQueueID refuses it, try the next.
	for _, m := range cands {
		err := s.q.LinkQueueID(e.ID, m.QueueID)
		if err == nil {
			s.log.Info("held message found in the MTA's hold queue", "id", e.ID, "queue_id", m.QueueID)
			e.QueueID = m.QueueID
			return e
		}
		if !errors.Is(err, quarantine.ErrState) {
			s.fail("store", err)
			s.log.Error("recording the queue ID of a held message failed", "id", e.ID, "err", err)
			return e
		}
	}
	return e
}

func hasRecipients(m *quarantine.QueuedMessage, want []string) bool {
	for _, w := range want {
		found := false
		for _, r := range m.Recipients {
			if strings.EqualFold(r, w) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
