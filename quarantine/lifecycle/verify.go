package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

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
	for i := range msgs {
		if msgs[i].QueueID == e.QueueID {
			reason = mismatch(&msgs[i], e)
			break
		}
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
