package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/mailout"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// ExpireAction says what happens to held and frozen mail nobody reviewed
// within MaxAge.
type ExpireAction string

const (
	// ExpireBounce returns the message to its envelope sender: frozen
	// mail with a DSN (RFC 3464) built here and sent from the null sender
	// through the re-injection listener, held mail with
	// Queue.Expire (Postfix: postsuper -f, which makes Postfix
	// return it with its own DSN). Mail from the null sender gets no DSN
	// (it is deleted, and logged).
	ExpireBounce ExpireAction = "bounce"
	// ExpireKeep keeps the message and flags the entry ("past max_age")
	// until an operator thaws or deletes it.
	ExpireKeep ExpireAction = "keep"
)

// Rates is what the Service needs of the rate engine (*policy.Engine
// implements it): forgetting a key's rate (thaw --reset-rate) and reading
// it (automatic release).
type Rates interface {
	// Reset forgets key's rate under limit, or every limit when limit is
	// "", and returns how many states were removed.
	Reset(ctx context.Context, key, limit string) (int, error)
	// Lookup returns key's rate under every limit with state for it,
	// decayed to now.
	Lookup(ctx context.Context, now time.Time, key string) ([]policy.KeyRate, error)
	// Limits returns the configured limits.
	Limits() []policy.LimitInfo
}

// Options configure a Service.
type Options struct {
	// Queue acts on held mail in the MTA's queue: release, return to the
	// sender on expiry, delete, show, and list to find a queue ID
	// (postfix.Queue runs Postfix's or Exim's commands). Nil means none:
	// every action on held mail fails.
	Queue Queue

	// Reinjector sends thawed frozen mail and DSNs; nil disables both
	// (thaws of frozen mail fail).
	Reinjector *mailout.Reinjector
	// ReportingMTA is the host name in DSNs (Reporting-MTA); "" means
	// os.Hostname.
	ReportingMTA string

	// MaxAge: held and frozen mail older than this is expired with
	// ExpireAction, audit records of thawed and deleted mail are removed.
	// Zero keeps everything.
	MaxAge       time.Duration
	ExpireAction ExpireAction

	// AlertEvery logs "KEY has N quarantined messages" each time a key's
	// count reaches a multiple of it (and at 1); zero means only at 1.
	AlertEvery int

	// DripLimits names the limits whose held/frozen mail is released
	// automatically once the key is back under the limit, one message
	// per period/limit (auto_release = "drip").
	DripLimits []string

	// Rates is the rate engine; nil disables --reset-rate and dripping.
	Rates Rates
	// Events receives what happens; nil means none (NopEvents).
	Events Events
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service runs the quarantine life cycle on one Store. It is safe for
// concurrent use. The zero value is not usable; call New.
type Service struct {
	q     *quarantine.Store
	queue Queue
	opts  Options
	log   *slog.Logger
	ev    Events
	now   func() time.Time
	token string // this process's claim token

	mu sync.Mutex
	// pending counts held/frozen entries per key (alerting);
	// awaitingQueueID remembers policy instances held at RCPT whose
	// queue ID arrives at END-OF-MESSAGE; lastDrip is when each key last
	// had a message released automatically.
	pending         map[string]int
	awaitingQueueID map[string]struct{}
	// incomplete are the held entries whose recipients, size and
	// subject CompleteHeld still takes from the MTA's queue, with the
	// attempts made (bounded by maxIncomplete).
	incomplete map[string]int
	lastDrip   map[string]time.Time
	// runs are the drip runs in progress, by limit and key (AutoRelease).
	runs map[string]*dripRun
	// drip is the set of limits with auto_release = "drip".
	drip map[string]bool
	// health is what Health reports besides the store's counts.
	health Health

	m metrics
}

// maxAwaiting bounds the instances remembered between RCPT and
// END-OF-MESSAGE.
const maxAwaiting = 10000

// New returns a Service on q. Errors: those of q.Stats (a corrupt
// store), an invalid ExpireAction.
func New(q *quarantine.Store, opts Options) (*Service, error) {
	switch opts.ExpireAction {
	case "":
		opts.ExpireAction = ExpireBounce
	case ExpireBounce, ExpireKeep:
	default:
		return nil, fmt.Errorf("lifecycle: unknown expire action %q (bounce or keep)", opts.ExpireAction)
	}
	tok := make([]byte, 8)
	rand.Read(tok)
	s := &Service{q: q, opts: opts, log: opts.Logger, ev: opts.Events, now: opts.Now, token: hex.EncodeToString(tok),
		drip: map[string]bool{}, awaitingQueueID: map[string]struct{}{}, incomplete: map[string]int{}, lastDrip: map[string]time.Time{}, runs: map[string]*dripRun{}, m: newMetrics()}
	if s.queue = opts.Queue; s.queue == nil {
		s.queue = noQueue{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.ev == nil {
		s.ev = NopEvents{}
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.SetDripLimits(opts.DripLimits)
	st, err := q.Stats()
	if err != nil {
		return nil, err
	}
	if st.Damaged > 0 {
		s.log.Error("quarantine entries cannot be read: kept with their messages, skipped by list, release and expiry (ratelimitd state check)",
			"entries", st.Damaged, "ids", st.DamagedIDs)
	}
	s.pending = st.ByKey
	if s.pending == nil {
		s.pending = map[string]int{}
	}
	return s, nil
}

// SetDripLimits replaces the set of limits whose mail is released
// automatically (a configuration reload); it is safe for concurrent use.
func (s *Service) SetDripLimits(names []string) {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	s.mu.Lock()
	s.drip = m
	s.mu.Unlock()
}

// Store returns the quarantine store the Service acts on.
func (s *Service) Store() *quarantine.Store { return s.q }

// emit sends an event.
func (s *Service) emit(ctx context.Context, kind Kind, e quarantine.Entry, by, detail string) {
	s.ev.QuarantineEvent(ctx, Event{Kind: kind, Time: s.now(), Entry: e, By: by, Detail: detail})
}

// Message is what a front end knows of the message a decision is about.
type Message struct {
	Request *policy.Request
	// Recipients are the accepted recipients (the milter's); nil means
	// Request.Recipient.
	Recipients []string
	// Body reads the whole message (the milter's, for a freeze); nil
	// through policy delegation.
	Body io.ReadSeeker
}

// Record records in the quarantine what decision d means for the message
// m, once per decision of either front end:
//
//   - Hold, or Freeze without m.Body (policy delegation answers a freeze
//     HOLD): a held entry, or the queue ID, size and recipient added to
//     the one held for the same message (same Request.Instance);
//   - Freeze with m.Body: a frozen entry holding the whole message;
//   - any other action at END-OF-MESSAGE: the entry held at RCPT for the
//     message gets its queue ID.
//
// It returns the entry's ID ("" when there is none) once it is committed
// and fsync'd. On error nothing was recorded: the caller must not answer
// HOLD or discard the message (it defers or temp-fails), and the failure
// is logged and counted. A queue ID not in an MTA's syntax, or that
// another pending entry has, is left out (logged and counted).
func (s *Service) Record(ctx context.Context, m Message, d *policy.Decision) (string, error) {
	req := m.Request
	switch {
	case d.Action == policy.Freeze && m.Body != nil:
		e := s.entryFor(m, d)
		r, err := quarantine.Recorded{}, error(nil)
		if _, err = m.Body.Seek(0, io.SeekStart); err == nil {
			r, err = s.q.RecordFreeze(e, m.Body)
		}
		if err != nil {
			s.fail("record", err)
			s.log.Error("freezing a message failed: temp-failing it", "err", err)
			return "", err
		}
		s.recorded(ctx, e, r)
		return r.ID, nil
	case d.Action == policy.Hold || d.Action == policy.Freeze:
		e := s.entryFor(m, d)
		r, err := s.q.RecordHold(e)
		if err != nil {
			s.fail("record", err)
			s.log.Error("recording a held message failed: deferring it instead of holding it", "err", err, "queue_id", e.QueueID)
			return "", err
		}
		s.awaiting(req.Instance, e.QueueID == "" || r.RefusedQueueID != "")
		if !r.Added {
			s.noteIncomplete(r.ID)
		}
		s.recorded(ctx, e, r)
		return r.ID, nil
	case req.ProtocolState == policy.StateEndOfMessage && req.QueueID != "" && s.awaiting(req.Instance, false):
		e := s.entryFor(m, d)
		if e.QueueID == "" {
			return "", nil
		}
		r, err := s.q.AddToHeld(e)
		if err != nil {
			s.fail("record", err)
			s.log.Error("linking a held message to its queue ID failed", "err", err, "queue_id", e.QueueID)
			return "", err
		}
		s.recorded(ctx, e, r)
		return r.ID, nil
	}
	return "", nil
}

// awaiting remembers instance as held at RCPT without a queue ID (await
// true), or forgets it; it reports whether it was remembered.
func (s *Service) awaiting(instance string, await bool) bool {
	if instance == "" {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, was := s.awaitingQueueID[instance]
	if !await {
		delete(s.awaitingQueueID, instance)
		return was
	}
	if len(s.awaitingQueueID) >= maxAwaiting {
		clear(s.awaitingQueueID) // END-OF-MESSAGE never came: those keep no queue ID
	}
	// A clone: the decoder's strings share blocks (mta/postfix.Decoder).
	s.awaitingQueueID[strings.Clone(instance)] = struct{}{}
	return was
}

// entryFor builds the entry of m and d. A queue ID not in an MTA's syntax
// is client data that must never reach postsuper: it is left out, logged
// and counted.
func (s *Service) entryFor(m Message, d *policy.Decision) *quarantine.Entry {
	req := m.Request
	rcpts := m.Recipients
	if len(rcpts) == 0 && req.Recipient != "" {
		rcpts = []string{req.Recipient}
	}
	e := &quarantine.Entry{Limit: d.Limit, Key: d.Key, Rate: d.Rate, Max: d.Max, Sender: req.Sender, Recipients: rcpts,
		ClientAddress: req.ClientAddress, ClientName: req.ClientName, SASLUsername: req.SASLUsername,
		QueueID: req.QueueID, Instance: req.Instance, Size: req.Size}
	if e.QueueID != "" && !quarantine.ValidQueueID(e.QueueID) {
		s.refusedQueueID(e, "refusing a queue ID that is not in Postfix or Exim syntax (forged policy request?); the hold is recorded without one")
		e.QueueID = ""
	}
	return e
}

// refusedQueueID logs and counts e's queue ID refused for why.
func (s *Service) refusedQueueID(e *quarantine.Entry, why string) {
	s.m.badQueueIDs.Inc()
	s.log.Warn(why, "queue_id", quarantine.CleanLine(policy.SanitizeText(e.QueueID, 64)), "client_address", e.ClientAddress,
		"sasl_username", e.SASLUsername, "instance", e.Instance)
}

// recorded reports what Record stored: a refused queue ID, and for a new
// entry the alert count, metric and Quarantined event.
func (s *Service) recorded(ctx context.Context, e *quarantine.Entry, r quarantine.Recorded) {
	if r.RefusedQueueID != "" {
		e.QueueID = r.RefusedQueueID
		s.refusedQueueID(e, "refusing a queue ID another quarantined message already has (forged policy request?); the hold is recorded without one")
		e.QueueID = ""
	}
	if r.Added || r.ID == "" {
		return
	}
	action := e.Action
	s.m.quarantined.WithLabelValues(e.Limit, action).Inc()
	s.mu.Lock()
	s.pending[e.Key]++
	n := s.pending[e.Key]
	s.mu.Unlock()
	alert := n == 1 || (s.opts.AlertEvery > 0 && n%s.opts.AlertEvery == 0)
	if alert {
		s.m.keyAlerts.Inc()
		s.log.Warn(quarantine.CleanLine(e.Key)+" has "+plural.N(n, "quarantined message"), "key", e.Key, "count", n,
			"limit", e.Limit, "action", action, "rate", e.Rate, "max", e.Max)
	}
	s.ev.QuarantineEvent(ctx, Event{Kind: Quarantined, Time: s.now(), Entry: *e, Detail: action, Pending: n, Alert: alert})
}

// forget drops a key's entry from the alert count.
func (s *Service) forget(key string) {
	s.mu.Lock()
	if s.pending[key] > 1 {
		s.pending[key]--
	} else {
		delete(s.pending, key)
	}
	s.mu.Unlock()
}

// PolicyHold is Record of a HOLD (or Freeze) answered through policy
// delegation.
//
// Deprecated: use Record.
func (s *Service) PolicyHold(ctx context.Context, req *policy.Request, d *policy.Decision) error {
	hold := *d
	if hold.Action != policy.Freeze {
		hold.Action = policy.Hold
	}
	_, err := s.Record(ctx, Message{Request: req}, &hold)
	return err
}

// EndOfMessage is Record of a decision at END-OF-MESSAGE that is not a
// hold.
//
// Deprecated: use Record.
func (s *Service) EndOfMessage(req *policy.Request) {
	s.Record(context.Background(), Message{Request: req}, &policy.Decision{})
}

// Freeze is Record of a milter Freeze.
//
// Deprecated: use Record.
func (s *Service) Freeze(ctx context.Context, req *policy.Request, rcpts []string, body io.ReadSeeker, d policy.Decision) (string, error) {
	d.Action = policy.Freeze
	return s.Record(ctx, Message{Request: req, Recipients: rcpts, Body: body}, &d)
}

// Hold is Record of a milter Hold.
//
// Deprecated: use Record.
func (s *Service) Hold(ctx context.Context, req *policy.Request, rcpts []string, d policy.Decision) (string, error) {
	d.Action = policy.Hold
	return s.Record(ctx, Message{Request: req, Recipients: rcpts}, &d)
}

// Health is the quarantine's part of "ratelimitd status": the loud
// summary of its faults.
type Health struct {
	Held   int `json:"held"`
	Frozen int `json:"frozen"`
	// Failures counts failed operations since start (the sum of
	// ratelimitd_quarantine_failures_total); LastError is the latest, at
	// LastErrorAt.
	Failures    int64     `json:"failures"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// KeptPastMaxAge is how many messages the last expiry run kept past
	// max_age; Suspended how many keys have automatic release suspended.
	KeptPastMaxAge int `json:"kept_past_max_age"`
	Suspended      int `json:"suspended_keys"`
	// Damaged counts the entries that cannot be read (kept, skipped).
	Damaged int `json:"damaged,omitempty"`
}

// Health returns the quarantine's counts and faults. It is safe for
// concurrent use.
func (s *Service) Health() Health {
	s.mu.Lock()
	h := s.health
	s.mu.Unlock()
	if st, err := s.q.Stats(); err == nil {
		h.Held, h.Frozen, h.Damaged = st.Held, st.Frozen, st.Damaged
	}
	if sp, err := s.q.Suspended(); err == nil {
		h.Suspended = len(sp)
	}
	return h
}

// fail counts a failed operation (metric and Health); the caller logs it.
func (s *Service) fail(op string, err error) {
	s.m.failures.WithLabelValues(op).Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health.Failures++
	if err != nil {
		s.health.LastError = op + ": " + quarantine.CleanLine(err.Error())
		s.health.LastErrorAt = s.now()
	}
}

// errNoQueueID: a held entry without a queue ID cannot be released in the
// MTA.
var errNoQueueID = errors.New("lifecycle: no MTA queue ID recorded for this held message (find it with postqueue -p)")
