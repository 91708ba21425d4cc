package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// A held entry's queue ID came from the MTA through the policy protocol
// or the milter, so any local user who can reach the policy port can
// forge one in valid syntax, naming someone else's queued message.
// Before any command runs on a held message (release, delete, show,
// expiry), confirmHeld lists the MTA's queue (Queue.List: postqueue -j,
// exim -bp) and checks that the queue ID names a message on hold with the
// entry's sender and recipients that arrived when the entry was recorded.
// A mismatch is refused, logged, counted ("verify" failures) and recorded
// on the entry (Entry.Unverified, shown by quarantine list and show).

// errUnverified wraps every refusal of confirmHeld.
var errUnverified = errors.New("lifecycle: the MTA's hold queue does not confirm the queue ID; no command was run")

// confirmHeld returns held entry e with its queue ID confirmed in the
// MTA's queue listing, or found there when it has none (findQueueID; the
// entry is then returned without one if nothing matches, and the caller
// reports errNoQueueID). Entries that are not held are returned as they
// are. The error wraps errUnverified when the listing contradicts the
// entry, or says why the queue could not be listed
// (quarantine.ErrNoQueueList: nothing can be confirmed, nothing is run).
func (s *Service) confirmHeld(ctx context.Context, e quarantine.Entry) (quarantine.Entry, error) {
	if e.State != quarantine.Held {
		return e, nil
	}
	msgs, err := s.queue.List(ctx)
	if err != nil {
		if !errors.Is(err, quarantine.ErrNoQueueList) {
			s.fail("queue_list", err)
			s.log.Error("listing the MTA's queue failed", "id", e.ID, "queue_id", e.QueueID, "err", err)
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
	for i := range msgs {
		if msgs[i].QueueID == e.QueueID {
			reason = mismatch(&msgs[i], e)
			break
		}
	}
	if reason == "" {
		if e.Unverified != "" {
			s.setUnverified(e.ID, "")
			e.Unverified = ""
		}
		return e, nil
	}
	reason = quarantine.CleanLine(reason[:min(len(reason), 400)])
	s.fail("verify", errors.New(reason))
	s.log.Warn("refusing to act on a held message: the MTA's hold queue does not confirm its queue ID (forged policy request?)",
		"id", e.ID, "queue_id", e.QueueID, "sender", e.Sender, "key", e.Key, "reason", reason)
	s.setUnverified(e.ID, reason)
	e.Unverified = reason
	return e, fmt.Errorf("%w: %s", errUnverified, reason)
}

// setUnverified records (or clears, with "") why e's queue ID is not
// confirmed; a failure is logged and counted.
func (s *Service) setUnverified(id, reason string) {
	if err := s.q.SetUnverified(id, reason); err != nil {
		s.fail("store", err)
		s.log.Error("recording whether a held message's queue ID is confirmed failed", "id", id, "err", err)
	}
}
