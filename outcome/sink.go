package outcome

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Outcome is what a feed says happened to one recipient of a queued message.
type Outcome struct {
	QueueID   string
	Recipient string
	Kind      policy.OutcomeKind
}

// Recorder counts outcomes and recipients in the outcome limits; *policy.Engine is one.
type Recorder interface {
	RecordOutcome(ctx context.Context, now time.Time, req *policy.Request, kind policy.OutcomeKind) (int, error)
	RecordRecipients(ctx context.Context, now time.Time, req *policy.Request, n int) (int, error)
}

// Sink counts each outcome of a joined message once per recipient and
// kind. Safe for concurrent use.
type Sink struct {
	join *Join
	rec  Recorder
	// Counted, Unjoined, Repeated and Failed count outcomes by kind:
	// counted, of a message not joined (not ours, held, past its lifetime),
	// seen before, and not counted for a store error.
	Counted, Unjoined, Repeated, Failed Counts
}

// Counts counts outcomes by kind; the zero value is ready. Safe for concurrent use.
type Counts [policy.OutcomeDeferral + 1]atomic.Int64

// Add counts one outcome of kind k (ignored if k is no kind).
func (c *Counts) Add(k policy.OutcomeKind) {
	if k >= policy.OutcomeBounce && int(k) < len(c) {
		c[k].Add(1)
	}
}

// Load returns how many outcomes of kind k were counted.
func (c *Counts) Load(k policy.OutcomeKind) int64 {
	if k >= policy.OutcomeBounce && int(k) < len(c) {
		return c[k].Load()
	}
	return 0
}

// NewSink returns a Sink joining through j and counting in rec.
func NewSink(j *Join, rec Recorder) *Sink { return &Sink{join: j, rec: rec} }

// Deliver counts o at now; it returns the store's error, if any.
func (s *Sink) Deliver(ctx context.Context, now time.Time, o Outcome) error {
	if _, ok := s.join.Lookup(o.QueueID); !ok {
		s.Unjoined.Add(o.Kind)
		return nil
	}
	sub, ok := s.join.Claim(o.QueueID, o.Recipient, o.Kind)
	if !ok {
		s.Repeated.Add(o.Kind)
		return nil
	}
	return s.count(ctx, now, sub, o.Recipient, o.Kind)
}

// count counts an outcome of kind for recipient rcpt of sub's message.
func (s *Sink) count(ctx context.Context, now time.Time, sub Submission, rcpt string, kind policy.OutcomeKind) error {
	if _, err := s.rec.RecordOutcome(ctx, now, sub.Request(rcpt), kind); err != nil {
		s.Failed.Add(kind)
		return err
	}
	s.Counted.Add(kind)
	return nil
}

// recipients counts n recipients of sub's message in the ratio limits
// (policy.Engine.RecordRecipients).
func (s *Sink) recipients(ctx context.Context, now time.Time, sub Submission, n int) error {
	_, err := s.rec.RecordRecipients(ctx, now, sub.Request(""), n)
	return err
}
