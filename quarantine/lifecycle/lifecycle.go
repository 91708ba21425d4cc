// Package lifecycle records held and frozen mail, thaws, deletes and
// expires it (RFC 3464 DSN), and releases it at the limit's rate ("drip").
// Each action is claim, act, record, so a crash repeats only what is
// harmless; queue IDs are confirmed in the MTA's queue listing before any
// command runs. The Service is safe for concurrent use.
package lifecycle

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/mailout"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// ExpireAction says what happens to pending mail older than MaxAge.
type ExpireAction string

const (
	// ExpireBounce returns frozen mail by DSN (RFC 3464), held mail by
	// Queue.Expire (postsuper -f); frozen mail from <> is deleted.
	ExpireBounce ExpireAction = "bounce"
	// ExpireKeep keeps the message, flagged, for an operator.
	ExpireKeep ExpireAction = "keep"
)

// Rates is what the Service needs of *policy.Engine: Reset (limit "":
// all) returns the states removed; Lookup returns key's decayed rates.
type Rates interface {
	Reset(ctx context.Context, key, limit string) (int, error)
	Lookup(ctx context.Context, now time.Time, key string) ([]policy.KeyRate, error)
	Limits() []policy.LimitInfo
}

// Options configure a Service.
type Options struct {
	// Queue acts on held mail; nil: every held-mail action fails.
	Queue Queue
	// Reinjector sends thawed frozen mail and DSNs; nil: both fail.
	Reinjector *mailout.Reinjector
	// ReportingMTA is the DSNs' Reporting-MTA; "" means os.Hostname.
	ReportingMTA string
	// MaxAge: older pending mail is expired, older audit records
	// removed; zero keeps everything.
	MaxAge       time.Duration
	ExpireAction ExpireAction
	// KeepThawed keeps thawed frozen messages for Selection.Again (zero:
	// until the next Expire).
	KeepThawed time.Duration
	// AlertEvery logs "KEY has N quarantined messages" at 1 and multiples.
	AlertEvery int
	// DripLimits name the limits with auto_release = "drip".
	DripLimits []string
	// Rates is the rate engine; nil disables --reset-rate and dripping.
	Rates Rates
	// Events receives what happens; nil means NopEvents.
	Events Events
	// Logger; nil means slog.Default(). Now; nil means time.Now.
	Logger *slog.Logger
	Now    func() time.Time
}

// Service runs the quarantine life cycle on one Store; make it with New.
type Service struct {
	q     *quarantine.Store
	queue Queue
	opts  Options
	log   *slog.Logger
	ev    Events
	now   func() time.Time
	token string // this process's claim token

	mu              sync.Mutex
	pending         map[string]int       // pending entries per key (alerts)
	awaitingQueueID map[string]struct{}  // instances held at RCPT without a queue ID
	incomplete      map[string]int       // held entries complete completes: attempts
	completeMu      sync.Mutex           // one completion at a time (complete)
	lastDrip        map[string]time.Time // limit NUL key: last automatic release
	runs            map[string]*dripRun  // limit NUL key: drip runs in progress
	drip            []string             // limits with auto_release = "drip"
	health          Health               // what Health adds to the store's counts

	m metrics
}

// maxAwaiting bounds awaitingQueueID and lastDrip.
const maxAwaiting = 10000

// New returns a Service on q. Errors: q.Stats's, an unknown ExpireAction.
func New(q *quarantine.Store, opts Options) (*Service, error) {
	opts.ExpireAction = cmp.Or(opts.ExpireAction, ExpireBounce)
	if opts.ExpireAction != ExpireBounce && opts.ExpireAction != ExpireKeep {
		return nil, fmt.Errorf("lifecycle: unknown expire action %q (bounce or keep)", opts.ExpireAction)
	}
	if opts.ReportingMTA == "" {
		opts.ReportingMTA, _ = os.Hostname()
	}
	// Not cmp.Or for Queue and Events: their dynamic types may not be comparable.
	s := &Service{q: q, opts: opts, queue: opts.Queue, log: cmp.Or(opts.Logger, slog.Default()), ev: opts.Events,
		now: opts.Now, token: rand.Text(), awaitingQueueID: map[string]struct{}{},
		incomplete: map[string]int{}, lastDrip: map[string]time.Time{}, runs: map[string]*dripRun{}, m: newMetrics()}
	if s.queue == nil {
		s.queue = noQueue{}
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
	if len(st.DamagedIDs) > 0 {
		s.log.Error("quarantine entries cannot be read: kept with their messages, skipped by list, release and expiry (ratelimitd state check)",
			"entries", len(st.DamagedIDs), "ids", st.DamagedIDs)
	}
	s.pending = st.ByKey // never nil
	return s, nil
}

// SetDripLimits replaces Options.DripLimits (a configuration reload).
func (s *Service) SetDripLimits(names []string) {
	s.mu.Lock()
	s.drip = slices.Clone(names)
	s.mu.Unlock()
}

func (s *Service) emit(ctx context.Context, kind Kind, e quarantine.Entry, by, detail string) {
	s.ev.QuarantineEvent(ctx, Event{Kind: kind, Time: s.now(), Entry: e, By: by, Detail: detail})
}

// Message is what a front end knows of the message a decision is about.
type Message struct {
	Request *policy.Request
	// Recipients are the accepted recipients; nil means Request.Recipient.
	Recipients []string
	// Body reads the whole message (milter freeze); nil via policy.
	Body io.ReadSeeker
}

// Record stores what d means for m (a held entry, a frozen one with
// m.Body, or at END-OF-MESSAGE the RCPT entry's queue ID) and returns the
// entry's ID ("" if none) once fsync'd. On error nothing was recorded: the
// caller must defer or temp-fail, not HOLD or discard.
func (s *Service) Record(ctx context.Context, m Message, d *policy.Decision) (string, error) {
	req := m.Request
	hold := d.Action == policy.Hold || d.Action == policy.Freeze
	freeze := d.Action == policy.Freeze && m.Body != nil
	if !hold && (req.ProtocolState != policy.StateEndOfMessage || req.QueueID == "" || !s.awaiting(req.Instance, false)) {
		return "", nil
	}
	e := s.entryFor(m, d)
	var r quarantine.Recorded
	var err error
	failed := "linking a held message to its queue ID failed"
	switch {
	case freeze:
		failed = "freezing a message failed: temp-failing it"
		if _, err = m.Body.Seek(0, io.SeekStart); err == nil {
			r, err = s.q.RecordFreeze(e, io.MultiReader(strings.NewReader(s.received(req, e.Recipients)), m.Body))
		}
	case hold:
		failed = "recording a held message failed: deferring it instead of holding it"
		r, err = s.q.RecordHold(e, false)
	case e.QueueID != "":
		r, err = s.q.RecordHold(e, true)
	}
	if err != nil {
		s.failed("record", err, failed, "queue_id", e.QueueID)
		return "", err
	}
	if hold && !freeze {
		s.awaiting(req.Instance, req.QueueID == "") // without one, RecordHold made a new entry
		if !r.Added {
			s.noteIncomplete(r.ID)
		}
	}
	s.recorded(ctx, e, r)
	return r.ID, nil
}

// received rebuilds from req the Received: field (RFC 5321 4.4, CRLF) the
// MTA puts on its copy, which a milter's copy lacks, as Postfix's smtpd
// does (ESMTPA for SASL, a single recipient named).
func (s *Service) received(req *policy.Request, rcpts []string) string {
	safe := func(v, or string) string { // one atom-ish token, no folding or comment breakers
		v = strings.Map(func(r rune) rune {
			if r <= ' ' || r > '~' || r == '(' || r == ')' || r == ';' || r == '[' || r == ']' || r == '<' || r == '>' {
				return -1
			}
			return r
		}, v)
		return cmp.Or(clip(v, 255), or)
	}
	proto := "ESMTP"
	if req.SASLMethod != "" || req.SASLUsername != "" {
		proto = "ESMTPA"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Received: from %s (%s [%s])\r\n\tby %s (ratelimitd, for the MTA) with %s", safe(req.HeloName, "unknown"),
		safe(req.ClientName, "unknown"), safe(req.ClientAddress, "unknown"), safe(s.opts.ReportingMTA, "localhost"), proto)
	if q := req.QueueID; quarantine.ValidQueueID(q) {
		b.WriteString(" id " + q)
	}
	if len(rcpts) == 1 {
		b.WriteString("\r\n\tfor <" + safe(rcpts[0], "") + ">")
	}
	b.WriteString("; " + s.now().Format(time.RFC1123Z) + "\r\n")
	return b.String()
}

// awaiting remembers or forgets instance as held at RCPT without queue ID.
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
	s.awaitingQueueID[strings.Clone(instance)] = struct{}{} // not the decoder's shared block
	return was
}

// entryFor builds the entry of m (Message.Recipients, else
// Request.Recipient) and d, without (logged) a queue ID not in an MTA's
// syntax.
func (s *Service) entryFor(m Message, d *policy.Decision) *quarantine.Entry {
	req, rcpts := m.Request, m.Recipients
	if len(rcpts) == 0 && req.Recipient != "" {
		rcpts = []string{req.Recipient}
	}
	e := &quarantine.Entry{Limit: d.Limit, Key: d.Key, Rate: d.Rate, Max: d.Max, Sender: req.Sender, Recipients: rcpts,
		ClientAddress: req.ClientAddress, ClientName: req.ClientName, SASLUsername: req.SASLUsername,
		QueueID: req.QueueID, Instance: req.Instance, Size: req.Size}
	if e.QueueID != "" && !quarantine.ValidQueueID(e.QueueID) {
		s.refusedQueueID(e, e.QueueID, "is not in Postfix or Exim syntax")
		e.QueueID = ""
	}
	return e
}

func (s *Service) refusedQueueID(e *quarantine.Entry, qid, why string) {
	s.m.badQueueIDs.Inc()
	s.log.Warn("refusing a queue ID that "+why+" (forged policy request?); the hold is recorded without one",
		"queue_id", clip(qid, 64), "client_address", e.ClientAddress, "sasl_username", e.SASLUsername, "instance", e.Instance)
}

// recorded logs, counts and emits what Record stored.
func (s *Service) recorded(ctx context.Context, e *quarantine.Entry, r quarantine.Recorded) {
	if r.RefusedQueueID != "" {
		s.refusedQueueID(e, r.RefusedQueueID, "another quarantined message already has")
	}
	if r.Added || r.ID == "" {
		return
	}
	s.m.quarantined.WithLabelValues(e.Limit, e.Action).Inc()
	s.mu.Lock()
	s.pending[e.Key]++
	n := s.pending[e.Key]
	s.mu.Unlock()
	alert := n == 1 || (s.opts.AlertEvery > 0 && n%s.opts.AlertEvery == 0)
	if alert {
		s.m.keyAlerts.Inc()
		s.log.Warn(termsafe.Line(e.Key)+" has "+plural.N(n, "quarantined message"), "key", e.Key, "count", n,
			"limit", e.Limit, "action", e.Action, "rate", e.Rate, "max", e.Max)
	}
	s.ev.QuarantineEvent(ctx, Event{Kind: Quarantined, Time: s.now(), Entry: *e, Detail: e.Action, Pending: n, Alert: alert})
}

func (s *Service) forget(key string) {
	s.mu.Lock()
	if s.pending[key]--; s.pending[key] <= 0 {
		delete(s.pending, key)
	}
	s.mu.Unlock()
}

// Health is the quarantine's part of "ratelimitd status".
type Health struct {
	Held        int       `json:"held"`
	Frozen      int       `json:"frozen"`
	Failures    int64     `json:"failures"` // since start
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// KeptPastMaxAge: messages the last expiry run kept past max_age.
	KeptPastMaxAge int `json:"kept_past_max_age"`
	Suspended      int `json:"suspended_keys"`
	Damaged        int `json:"damaged,omitempty"` // unreadable entries
}

// Health returns the quarantine's counts and faults.
func (s *Service) Health() Health {
	s.mu.Lock()
	h := s.health
	s.mu.Unlock()
	if st, err := s.q.Stats(); err == nil {
		h.Held, h.Frozen, h.Damaged = st.Held, st.Frozen, len(st.DamagedIDs)
	}
	if sp, err := s.q.Suspended(); err == nil {
		h.Suspended = len(sp)
	}
	return h
}

// failed counts a failed operation and logs msg with args and err.
func (s *Service) failed(op string, err error, msg string, args ...any) {
	s.fail(op, err)
	s.log.Error(msg, append(args, "err", err)...)
}

// fail counts a failed operation; the caller logs it.
func (s *Service) fail(op string, err error) {
	s.m.failures.WithLabelValues(op).Inc()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health.Failures++
	if err != nil {
		s.health.LastError = op + ": " + termsafe.Line(err.Error())
		s.health.LastErrorAt = s.now()
	}
}

var errNoQueueID = errors.New("lifecycle: no MTA queue ID recorded for this held message (find it with postqueue -p)")

// Kind names what happened to a quarantined message.
type Kind string

// The kinds of Event.
const (
	Quarantined Kind = "quarantined" // held or frozen (Detail "hold" or "freeze")
	Thawed      Kind = "thawed"      // released by an operator
	Deleted     Kind = "deleted"     // deleted by an operator
	// Expired: past max_age, bounced or (null sender) deleted; see Detail.
	Expired  Kind = "expired"
	Released Kind = "released" // released automatically ("drip")
	// ReleaseRun: a drip run ended (Detail why); Count released,
	// Pending left, Entry the last released.
	ReleaseRun Kind = "release_run"
	RateReset  Kind = "rate_reset" // Selection.ResetRate; Entry has only Key
)

// Event is one thing that happened to one quarantined message.
type Event struct {
	Kind  Kind
	Time  time.Time
	Entry quarantine.Entry // as it was then
	// By is who acted (Unix user, "offline CLI", "expiry", "auto-release").
	By      string
	Detail  string
	Pending int  // the key's pending messages
	Alert   bool // Pending reached Options.AlertEvery's threshold
	Count   int  // ReleaseRun: messages released
}

// Events receives the Service's events concurrently, without blocking.
type Events interface {
	QuarantineEvent(ctx context.Context, ev Event)
}

// NopEvents is the default Events.
type NopEvents struct{}

// QuarantineEvent does nothing.
func (NopEvents) QuarantineEvent(context.Context, Event) {}

type metrics struct {
	quarantined  *prometheus.CounterVec // limit, action
	keyAlerts    prometheus.Counter
	badQueueIDs  prometheus.Counter
	failures     *prometheus.CounterVec // what
	expired      *prometheus.CounterVec // outcome
	keptPastAge  prometheus.Gauge
	autoReleased prometheus.Counter
}

func newMetrics() metrics {
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	vec := func(name, help string, labels []string, preset ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
		for _, p := range preset { // at zero, so that alerts see the first
			v.WithLabelValues(p)
		}
		return v
	}
	return metrics{
		quarantined: vec("ratelimitd_quarantined_total", "Messages held or frozen, by limit and action.", []string{"limit", "action"}),
		keyAlerts: counter("ratelimitd_quarantine_key_alerts_total",
			"Times a key started being held/frozen, or its quarantined count reached another multiple of quarantine.alert_every."),
		badQueueIDs: counter("ratelimitd_quarantine_invalid_queue_ids_total",
			"Queue IDs refused because they are not in Postfix's or Exim's syntax or another quarantined message has them already (forged policy requests); the entry is recorded without one."),
		failures: vec("ratelimitd_quarantine_failures_total",
			"Failed quarantine operations: record, release, schedule (postqueue -i), reinject, delete, expire, dsn, store, queue_list, verify (a queue ID the MTA's hold queue does not confirm).",
			[]string{"operation"}, "record", "release", "schedule", "reinject", "delete", "expire", "dsn", "store", "list",
			"queue_list", "verify", "auto-release"),
		expired: vec("ratelimitd_quarantine_expired_total",
			"Held or frozen messages past quarantine.max_age, by outcome: bounced, deleted_null_sender, kept, failed.",
			[]string{"outcome"}, "bounced", "deleted_null_sender", "kept", "failed"),
		keptPastAge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_kept_past_max_age",
			Help: "Held or frozen messages past quarantine.max_age still kept at the last expiry run (expire_action keep, no queue ID, or a failed bounce)."}),
		autoReleased: counter("ratelimitd_quarantine_auto_released_total", "Messages released automatically (auto_release = \"drip\")."),
	}
}

// PresetLimit makes ratelimitd_quarantined_total{limit, action} exist at
// zero before the limit's first hold or freeze; safe for concurrent use.
func (s *Service) PresetLimit(limit, action string) { s.m.quarantined.WithLabelValues(limit, action) }

// Collectors returns the quarantine's Prometheus collectors.
func (s *Service) Collectors() []prometheus.Collector {
	stat := func(name, help string, f func(quarantine.Stats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			st, err := s.q.Stats()
			if err != nil {
				return -1
			}
			return float64(f(st))
		})
	}
	m := s.m
	return []prometheus.Collector{m.quarantined, m.keyAlerts, m.badQueueIDs, m.failures, m.expired, m.keptPastAge, m.autoReleased,
		stat("ratelimitd_quarantine_frozen_messages", "Frozen messages waiting for review.",
			func(st quarantine.Stats) int64 { return int64(st.Frozen) }),
		stat("ratelimitd_quarantine_held_messages", "Messages in the MTA hold queue recorded for review.",
			func(st quarantine.Stats) int64 { return int64(st.Held) }),
		stat("ratelimitd_quarantine_bytes", "Bytes of frozen messages stored.", func(st quarantine.Stats) int64 { return st.Bytes }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_max_key_messages", Help: "Quarantined messages of the key with the most."},
			func() float64 {
				s.mu.Lock()
				defer s.mu.Unlock()
				n := 0
				for _, c := range s.pending {
					n = max(n, c)
				}
				return float64(n)
			}),
	}
}
