package lifecycle

import (
	"context"
	"errors"
	"fmt"

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
