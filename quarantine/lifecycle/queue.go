package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// Queue is the MTA's queue, as the life cycle acts on held mail (mail the
// MTA keeps in its own hold queue). The Postfix implementation, running
// postsuper, postqueue and postcat, is postfix.Queue in mta/postfix; the
// same type runs Exim's commands (exim -Mt, exim -Mrm) when configured
// with them.
//
// queueID is always a valid queue ID (quarantine.ValidQueueID): the
// Service checks it before every call. Methods are called concurrently
// and must be safe for concurrent use; ctx bounds each call.
type Queue interface {
	// Release releases the held message to delivery (Postfix: postsuper
	// -H, then postqueue -i to deliver it now rather than at the next
	// queue run). err means it was not released; warnings are failures
	// of follow-up steps after it was (the message then waits for the
	// MTA's next queue run).
	Release(ctx context.Context, queueID string) (warnings []error, err error)
	// Expire returns the held message to its sender (Postfix: postsuper
	// -f, then postqueue -i), with the same contract as Release.
	Expire(ctx context.Context, queueID string) (warnings []error, err error)
	// Delete removes the held message from the MTA's queue (postsuper -d).
	Delete(ctx context.Context, queueID string) error
	// Show returns the message as the MTA prints it (postcat -q); the
	// caller cleans it before printing (quarantine.CleanText).
	Show(ctx context.Context, queueID string) ([]byte, error)
	// List lists the MTA's queue (postqueue -j, exim -bp): every held
	// message's queue ID is confirmed in it (sender, recipients, arrival)
	// before Release, Expire, Delete or Show run, and the queue ID of a
	// message held at its first RCPT, before the MTA had one, is found in
	// it. A Queue that cannot list returns quarantine.ErrNoQueueList:
	// held mail with a queue ID is then never acted on.
	List(ctx context.Context) ([]quarantine.QueuedMessage, error)
}

// noQueue is the Queue of a Service configured without one: every action
// on held mail fails, and so does listing.
type noQueue struct{}

var errNoQueue = errors.New("lifecycle: no MTA queue commands configured")

func (noQueue) Release(context.Context, string) ([]error, error) { return nil, errNoQueue }
func (noQueue) Expire(context.Context, string) ([]error, error)  { return nil, errNoQueue }
func (noQueue) Delete(context.Context, string) error             { return errNoQueue }
func (noQueue) Show(context.Context, string) ([]byte, error)     { return nil, errNoQueue }
func (noQueue) List(context.Context) ([]quarantine.QueuedMessage, error) {
	return nil, quarantine.ErrNoQueueList
}

// checkQueueID returns why queueID must not be given to the Queue: none
// was recorded (errNoQueueID), or it is not a valid queue ID (recorded
// before queue IDs were checked: it is never passed on).
func checkQueueID(queueID string) error {
	if queueID == "" {
		return errNoQueueID
	}
	if !quarantine.ValidQueueID(queueID) {
		return fmt.Errorf("lifecycle: refusing to run a command with %q: not a Postfix or Exim queue ID",
			quarantine.CleanLine(queueID[:min(len(queueID), 64)]))
	}
	return nil
}

// releaseHeld runs release (the Queue's Release or Expire) for queueID,
// op naming it in the fault counts: a failure is counted as op, each
// failed follow-up step as "schedule" and logged; the follow-ups'
// failures are joined in warn.
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

// deleteHeld deletes the held message queueID from the MTA's queue.
func (s *Service) deleteHeld(ctx context.Context, queueID string) error {
	if err := checkQueueID(queueID); err != nil {
		return err
	}
	return s.queue.Delete(ctx, queueID)
}

// showHeld returns the held message queueID as the MTA prints it.
func (s *Service) showHeld(ctx context.Context, queueID string) ([]byte, error) {
	if err := checkQueueID(queueID); err != nil {
		return nil, err
	}
	return s.queue.Show(ctx, queueID)
}
