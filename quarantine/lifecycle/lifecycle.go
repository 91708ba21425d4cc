package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
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

// entryFor builds a quarantine entry from a request and its decision. A
// queue ID that is not in an MTA's syntax is left out (logged and
// counted): it is client data and must never reach postsuper.
func (s *Service) entryFor(req *policy.Request, d *policy.Decision, rcpts []string) *quarantine.Entry {
	if len(rcpts) == 0 && req.Recipient != "" {
		rcpts = []string{req.Recipient}
	}
	return &quarantine.Entry{Limit: d.Limit, Key: d.Key, Rate: d.Rate, Max: d.Max, Sender: req.Sender, Recipients: rcpts,
		ClientAddress: req.ClientAddress, ClientName: req.ClientName, SASLUsername: req.SASLUsername,
		QueueID: s.queueID(req), Instance: req.Instance, Size: req.Size}
}

// queueID returns req.QueueID if it is valid, else "" after logging and
// counting it.
func (s *Service) queueID(req *policy.Request) string {
	if req.QueueID == "" || quarantine.ValidQueueID(req.QueueID) {
		return req.QueueID
	}
	s.m.badQueueIDs.Inc()
	s.log.Warn("refusing a queue ID that is not in Postfix or Exim syntax (forged policy request?); the hold is recorded without one",
		"queue_id", quarantine.CleanLine(req.QueueID[:min(len(req.QueueID), 64)]), "client_address", req.ClientAddress,
		"sasl_username", req.SASLUsername, "instance", req.Instance)
	return ""
}

// recorded counts a new hold/freeze for alerting and reports it.
func (s *Service) recorded(ctx context.Context, e *quarantine.Entry, action string) {
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

// PolicyHold records a HOLD answered through policy delegation (a policy
// Freeze is sent as HOLD too). At RCPT the queue ID is not known yet: the
// entry is linked by instance and completed at END-OF-MESSAGE
// (EndOfMessage). One entry per message. The entry is committed (fsync)
// before PolicyHold returns nil; a failure to record it is logged, counted
// and returned, and the caller must not answer HOLD (the daemon defers
// instead), so that no message waits in the MTA's hold queue without an
// entry.
func (s *Service) PolicyHold(ctx context.Context, req *policy.Request, d *policy.Decision) error {
	if req.Instance != "" {
		s.mu.Lock()
		_, awaiting := s.awaitingQueueID[req.Instance]
		s.mu.Unlock()
		if awaiting {
			// Already recorded at RCPT: this is the same message.
			s.EndOfMessage(req)
			return nil
		}
	}
	if s.sameHeldMessage(req) {
		return nil
	}
	e := s.entryFor(req, d, nil)
	id, err := s.record(e, s.q.Hold)
	if err != nil {
		s.fail("record", err)
		s.log.Error("recording a held message failed: deferring it instead of holding it", "err", err, "queue_id", e.QueueID)
		return err
	}
	if req.Instance != "" && req.QueueID == "" {
		s.mu.Lock()
		if len(s.awaitingQueueID) >= maxAwaiting {
			// END-OF-MESSAGE never came for these (clients that gave
			// up): their entries keep no queue ID.
			clear(s.awaitingQueueID)
		}
		// A clone: the decoder's string shares a block with other
		// requests' values (mta/postfix.Decoder).
		s.awaitingQueueID[strings.Clone(req.Instance)] = struct{}{}
		s.mu.Unlock()
	}
	s.noteIncomplete(id)
	s.recorded(ctx, e, "hold")
	return nil
}

// EndOfMessage completes the entries held at RCPT for req.Instance with
// the queue ID (when it is valid), size and last recipient.
func (s *Service) EndOfMessage(req *policy.Request) {
	if req.Instance == "" || req.QueueID == "" {
		return
	}
	s.mu.Lock()
	_, ok := s.awaitingQueueID[req.Instance]
	delete(s.awaitingQueueID, req.Instance)
	s.mu.Unlock()
	if !ok {
		return
	}
	qid := s.queueID(req)
	if qid == "" {
		return
	}
	set := false
	_, err := s.q.UpdateByInstance(req.Instance, func(e *quarantine.Entry) bool {
		if set || e.QueueID != "" {
			return false
		}
		set = true
		e.QueueID, e.Size = qid, req.Size
		if req.RecipientCount > len(e.Recipients) && req.Recipient != "" {
			e.Recipients = append(e.Recipients, req.Recipient)
		}
		return true
	})
	switch {
	case errors.Is(err, quarantine.ErrDuplicateQueueID):
		s.duplicateQueueID(req, qid)
	case err != nil:
		s.fail("record", err)
		s.log.Error("linking a held message to its queue ID failed", "err", err, "queue_id", qid)
	}
}

// sameHeldMessage reports whether req is a later request about a message
// already held under its instance and queue ID (Postfix has a queue ID
// from the second RCPT on): that entry gains req's recipient and no second
// entry is made. A failure is logged and reported as false.
func (s *Service) sameHeldMessage(req *policy.Request) bool {
	if req.Instance == "" || req.QueueID == "" || !quarantine.ValidQueueID(req.QueueID) {
		return false
	}
	n, err := s.q.UpdateByInstance(req.Instance, func(e *quarantine.Entry) bool {
		if e.State != quarantine.Held || e.QueueID != req.QueueID {
			return false
		}
		if req.Recipient != "" && !slices.Contains(e.Recipients, req.Recipient) {
			e.Recipients = append(e.Recipients, req.Recipient)
		}
		return true
	})
	if err != nil {
		s.fail("record", err)
		s.log.Error("adding to a held message's entry failed", "err", err, "queue_id", req.QueueID)
		return false
	}
	return n > 0
}

// record stores e with put (Store.Hold, or a Freeze); a queue ID another
// pending entry already has is refused (quarantine.ErrDuplicateQueueID:
// forged, or a message recorded twice) and e is stored without it.
func (s *Service) record(e *quarantine.Entry, put func(*quarantine.Entry) (string, error)) (string, error) {
	id, err := put(e)
	if errors.Is(err, quarantine.ErrDuplicateQueueID) {
		s.duplicateQueueID(&policy.Request{QueueID: e.QueueID, ClientAddress: e.ClientAddress,
			SASLUsername: e.SASLUsername, Instance: e.Instance}, e.QueueID)
		e.QueueID = ""
		id, err = put(e)
	}
	return id, err
}

// duplicateQueueID logs and counts a queue ID refused because another
// pending entry has it.
func (s *Service) duplicateQueueID(req *policy.Request, qid string) {
	s.m.badQueueIDs.Inc()
	s.log.Warn("refusing a queue ID another quarantined message already has (forged policy request?); the hold is recorded without one",
		"queue_id", qid, "client_address", req.ClientAddress, "sasl_username", req.SASLUsername, "instance", req.Instance)
}

// Freeze stores a whole message, read from body to its end, as frozen
// (quarantine.Store.FreezeFrom: a large message is streamed into the
// store, never held in memory whole); it returns only after the entry is
// committed and fsync'd, so the MTA may then be told to discard its copy.
// On error nothing is stored and the caller must temp-fail the message.
func (s *Service) Freeze(ctx context.Context, req *policy.Request, rcpts []string, body io.ReadSeeker, d policy.Decision) (string, error) {
	e := s.entryFor(req, &d, rcpts)
	id, err := s.record(e, func(e *quarantine.Entry) (string, error) {
		if _, err := body.Seek(0, io.SeekStart); err != nil { // again after a refused queue ID
			return "", err
		}
		return s.q.FreezeFrom(e, body)
	})
	if err != nil {
		return "", err
	}
	s.recorded(ctx, e, "freeze")
	return id, nil
}

// Hold records a message the milter put on hold (its queue ID in
// req.QueueID).
func (s *Service) Hold(ctx context.Context, req *policy.Request, rcpts []string, d policy.Decision) (string, error) {
	e := s.entryFor(req, &d, rcpts)
	id, err := s.record(e, s.q.Hold)
	if err != nil {
		return "", err
	}
	s.noteIncomplete(id)
	s.recorded(ctx, e, "hold")
	return id, nil
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
