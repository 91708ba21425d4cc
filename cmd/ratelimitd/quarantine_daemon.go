package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/mta/milter"
	"github.com/ratelimitd/ratelimitd/mta/smtp"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// quarantineService is the review path shared by the daemon (admin API)
// and the offline CLI: list, show, thaw, delete, expire, and recording of
// new holds and freezes with alerting.
type quarantineService struct {
	q      *quarantine.Store
	cfg    config.Quarantine
	engine *policy.Engine
	log    *slog.Logger
	reinj  *smtp.Reinjector

	mu sync.Mutex
	// pending counts held/frozen entries per key (alerting), and
	// awaitingQueueID remembers policy instances held at RCPT whose queue
	// ID arrives at END-OF-MESSAGE.
	pending         map[string]int
	awaitingQueueID map[string]struct{}

	quarantined *prometheus.CounterVec // limit, action
	keyAlerts   prometheus.Counter
	badQueueIDs prometheus.Counter
}

func newQuarantineService(q *quarantine.Store, cfg config.Quarantine, eng *policy.Engine, log *slog.Logger) (*quarantineService, error) {
	s := &quarantineService{q: q, cfg: cfg, engine: eng, log: log,
		reinj:           &smtp.Reinjector{Addr: cfg.ReinjectAddr, Helo: cfg.ReinjectHelo},
		awaitingQueueID: map[string]struct{}{},
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimitd_quarantined_total",
			Help: "Messages held or frozen, by limit and action.",
		}, []string{"limit", "action"}),
		keyAlerts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimitd_quarantine_key_alerts_total",
			Help: "Times a key started being held/frozen, or its quarantined count reached another multiple of quarantine.alert_every.",
		}),
		badQueueIDs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimitd_quarantine_invalid_queue_ids_total",
			Help: "Queue IDs refused because they are not in Postfix's or Exim's syntax (forged policy requests); the entry is recorded without one.",
		}),
	}
	st, err := q.Stats()
	if err != nil {
		return nil, err
	}
	s.pending = st.ByKey
	if s.pending == nil {
		s.pending = map[string]int{}
	}
	return s, nil
}

// collectors exposes the quarantine metrics: counters, and gauges of
// quarantined messages and bytes read at scrape time.
func (s *quarantineService) collectors() []prometheus.Collector {
	stat := func(f func(quarantine.Stats) float64) func() float64 {
		return func() float64 {
			st, err := s.q.Stats()
			if err != nil {
				return -1
			}
			return f(st)
		}
	}
	return []prometheus.Collector{s.quarantined, s.keyAlerts, s.badQueueIDs,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_frozen_messages", Help: "Frozen messages waiting for review."},
			stat(func(st quarantine.Stats) float64 { return float64(st.Frozen) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_held_messages", Help: "Messages in the MTA hold queue recorded for review."},
			stat(func(st quarantine.Stats) float64 { return float64(st.Held) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_bytes", Help: "Bytes of frozen messages stored."},
			stat(func(st quarantine.Stats) float64 { return float64(st.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_quarantine_max_key_messages", Help: "Quarantined messages of the key with the most."},
			func() float64 {
				s.mu.Lock()
				defer s.mu.Unlock()
				m := 0
				for _, n := range s.pending {
					m = max(m, n)
				}
				return float64(m)
			}),
	}
}

// entryFor builds a quarantine entry from a request and its decision. A
// queue ID that is not in an MTA's syntax is left out (and logged and
// counted): it is client data and must never reach postsuper.
func (s *quarantineService) entryFor(req *policy.Request, d *policy.Decision, rcpts []string) *quarantine.Entry {
	if len(rcpts) == 0 && req.Recipient != "" {
		rcpts = []string{req.Recipient}
	}
	return &quarantine.Entry{Limit: d.Limit, Key: d.Key, Rate: d.Rate, Max: d.Max, Sender: req.Sender, Recipients: rcpts,
		ClientAddress: req.ClientAddress, ClientName: req.ClientName, SASLUsername: req.SASLUsername,
		QueueID: s.queueID(req), Instance: req.Instance, Size: req.Size}
}

// queueID returns req.QueueID if it is valid, else "" after logging and
// counting it.
func (s *quarantineService) queueID(req *policy.Request) string {
	if req.QueueID == "" || quarantine.ValidQueueID(req.QueueID) {
		return req.QueueID
	}
	s.badQueueIDs.Inc()
	s.log.Warn("refusing a queue ID that is not in Postfix or Exim syntax (forged policy request?); the hold is recorded without one",
		"queue_id", policy.SanitizeText(req.QueueID, 64), "client_address", req.ClientAddress, "sasl_username", req.SASLUsername, "instance", req.Instance)
	return ""
}

// recorded counts a new hold/freeze for alerting.
func (s *quarantineService) recorded(e *quarantine.Entry, action string) {
	s.quarantined.WithLabelValues(e.Limit, action).Inc()
	s.mu.Lock()
	s.pending[e.Key]++
	n := s.pending[e.Key]
	s.mu.Unlock()
	if n == 1 || (s.cfg.AlertEvery > 0 && n%s.cfg.AlertEvery == 0) {
		s.keyAlerts.Inc()
		s.log.Warn(fmt.Sprintf("%s has %d quarantined messages", e.Key, n), "key", e.Key, "count", n,
			"limit", e.Limit, "action", action, "rate", e.Rate, "max", e.Max)
	}
}

// policyHold records a HOLD answered through policy delegation (a policy
// Freeze is sent as HOLD too). At RCPT the queue ID is not known yet: the
// entry is linked by instance and completed at END-OF-MESSAGE. One entry
// per message.
func (s *quarantineService) policyHold(req *policy.Request, d *policy.Decision) {
	if req.Instance != "" {
		s.mu.Lock()
		_, awaiting := s.awaitingQueueID[req.Instance]
		s.mu.Unlock()
		if awaiting {
			// Already recorded at RCPT: this is the same message.
			s.endOfMessage(req)
			return
		}
	}
	e := s.entryFor(req, d, nil)
	if _, err := s.q.Hold(e); err != nil {
		s.log.Error("recording a held message failed (it stays in the MTA hold queue)", "err", err, "queue_id", req.QueueID)
		return
	}
	if req.Instance != "" && req.QueueID == "" {
		s.mu.Lock()
		if len(s.awaitingQueueID) >= maxAwaiting {
			// END-OF-MESSAGE never came for these (clients that gave
			// up): their entries keep no queue ID.
			clear(s.awaitingQueueID)
		}
		s.awaitingQueueID[req.Instance] = struct{}{}
		s.mu.Unlock()
	}
	s.recorded(e, "hold")
}

// maxAwaiting bounds the instances remembered between RCPT and
// END-OF-MESSAGE.
const maxAwaiting = 10000

// endOfMessage completes entries held at RCPT with the queue ID.
func (s *quarantineService) endOfMessage(req *policy.Request) {
	if req.Instance == "" || req.QueueID == "" {
		return
	}
	qid := s.queueID(req)
	s.mu.Lock()
	_, ok := s.awaitingQueueID[req.Instance]
	delete(s.awaitingQueueID, req.Instance)
	s.mu.Unlock()
	if !ok {
		return
	}
	if _, err := s.q.UpdateByInstance(req.Instance, func(e *quarantine.Entry) bool {
		if e.QueueID != "" {
			return false
		}
		if qid == "" {
			return false
		}
		e.QueueID, e.Size = qid, req.Size
		if req.RecipientCount > len(e.Recipients) && req.Recipient != "" {
			e.Recipients = append(e.Recipients, req.Recipient)
		}
		return true
	}); err != nil {
		s.log.Error("linking a held message to its queue ID failed", "err", err, "queue_id", req.QueueID)
	}
}

// released forgets a key's entry for alerting.
func (s *quarantineService) released(key string) {
	s.mu.Lock()
	if s.pending[key] > 1 {
		s.pending[key]--
	} else {
		delete(s.pending, key)
	}
	s.mu.Unlock()
}

// selection is what thaw and delete act on: IDs, or every pending entry
// matching a filter.
type selection struct {
	IDs       []string      `json:"ids,omitempty"`
	Sender    string        `json:"sender,omitempty"`
	Key       string        `json:"key,omitempty"`
	OlderThan time.Duration `json:"older_than,omitempty"`
	ResetRate bool          `json:"reset_rate,omitempty"`
	By        string        `json:"-"`
}

// outcome is the result for one entry of a thaw or delete.
type outcome struct {
	ID     string `json:"id"`
	Sender string `json:"sender"`
	Key    string `json:"key"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
}

func (s *quarantineService) selectEntries(sel selection) ([]quarantine.Entry, error) {
	if len(sel.IDs) > 0 {
		out := make([]quarantine.Entry, 0, len(sel.IDs))
		for _, id := range sel.IDs {
			e, err := s.q.Get(id)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", id, err)
			}
			out = append(out, e)
		}
		return out, nil
	}
	if sel.Sender == "" && sel.Key == "" && sel.OlderThan <= 0 {
		return nil, errors.New("name IDs, --sender, --key or --older-than")
	}
	f := quarantine.Filter{Sender: sel.Sender, Key: sel.Key, OldestFirst: true}
	if sel.OlderThan > 0 {
		f.Before = time.Now().Add(-sel.OlderThan)
	}
	return s.q.List(f)
}

// errNoQueueID: a held entry without a queue ID cannot be released or
// deleted in the MTA.
var errNoQueueID = errors.New("no MTA queue ID recorded for this held message")

// runMTA runs a hold-queue command with {queue_id} replaced.
func runMTA(ctx context.Context, tmpl []string, queueID string) ([]byte, error) {
	if queueID == "" {
		return nil, errNoQueueID
	}
	if !quarantine.ValidQueueID(queueID) {
		// Recorded before queue IDs were checked: never pass it on.
		return nil, fmt.Errorf("refusing to run %s with %q: not a Postfix or Exim queue ID", tmpl[0], policy.SanitizeText(queueID, 64))
	}
	args := make([]string, len(tmpl))
	for i, a := range tmpl {
		args[i] = strings.ReplaceAll(a, "{queue_id}", queueID)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// thaw releases the selected entries: held mail with the release command
// (postsuper -H), frozen mail by SMTP re-injection with its original
// envelope and an X-Ratelimitd-Thawed header. A failed re-injection leaves
// the message frozen with the error recorded. With ResetRate the keys'
// rates are forgotten first, so the sender can send again at once.
func (s *quarantineService) thaw(ctx context.Context, sel selection) ([]outcome, error) {
	entries, err := s.selectEntries(sel)
	if err != nil {
		return nil, err
	}
	if sel.ResetRate && s.engine != nil {
		done := map[string]bool{}
		for _, e := range entries {
			if e.Key == "" || done[e.Key] {
				continue
			}
			done[e.Key] = true
			n, err := s.engine.Reset(ctx, e.Key, "")
			if err != nil {
				return nil, fmt.Errorf("reset rate of %s: %w", e.Key, err)
			}
			s.log.Info("rate reset", "key", e.Key, "removed", n, "by", sel.By, "with", "quarantine thaw")
		}
	}
	return s.apply("quarantine thaw", entries, sel.By, func(e quarantine.Entry) error { return s.thawOne(ctx, e, sel.By) }), nil
}

// apply runs op on each entry, logs each result as what, and forgets the
// entries it succeeded on for alerting.
func (s *quarantineService) apply(what string, entries []quarantine.Entry, by string, op func(quarantine.Entry) error) []outcome {
	out := make([]outcome, 0, len(entries))
	for _, e := range entries {
		o := outcome{ID: e.ID, Sender: e.Sender, Key: e.Key}
		if err := op(e); err != nil {
			o.Error = err.Error()
		} else {
			o.OK = true
			s.released(e.Key)
		}
		s.log.Info(what, "id", e.ID, "state", e.State.String(), "sender", e.Sender, "key", e.Key,
			"queue_id", e.QueueID, "ok", o.OK, "err", o.Error, "by", by)
		out = append(out, o)
	}
	return out
}

func (s *quarantineService) thawOne(ctx context.Context, e quarantine.Entry, by string) error {
	switch e.State {
	case quarantine.Held:
		if _, err := runMTA(ctx, s.cfg.ReleaseCommand, e.QueueID); err != nil {
			s.q.RecordThawError(e.ID, err.Error())
			return err
		}
	case quarantine.Frozen:
		msg, err := s.q.Message(e.ID)
		if err != nil {
			return err
		}
		hdr := fmt.Sprintf("X-Ratelimitd-Thawed: id=%s; limit=%s; key=%s; frozen=%s; thawed=%s; by=%s", e.ID,
			e.Limit, e.Key, e.Created.UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339), headerSafe(by))
		if err := s.reinj.Reinject(ctx, e.Sender, e.Recipients, policy.SanitizeText(hdr, 900), msg); err != nil {
			s.q.RecordThawError(e.ID, err.Error())
			return err
		}
	default:
		return fmt.Errorf("entry is %s, not held or frozen", e.State)
	}
	return s.q.MarkThawed(e.ID)
}

func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ';' || r < 0x20 || r > 0x7e {
			return '_'
		}
		return r
	}, s)
}

// remove deletes the selected entries: held mail from the MTA too
// (postsuper -d), frozen mail from our store.
func (s *quarantineService) remove(ctx context.Context, sel selection) ([]outcome, error) {
	entries, err := s.selectEntries(sel)
	if err != nil {
		return nil, err
	}
	return s.apply("quarantine delete", entries, sel.By, func(e quarantine.Entry) error {
		if e.State == quarantine.Held && e.QueueID != "" {
			if _, err := runMTA(ctx, s.cfg.DeleteCommand, e.QueueID); err != nil {
				return err
			}
		}
		// A held entry without a queue ID (a forged request, or a
		// client that never reached END-OF-MESSAGE) names nothing the
		// MTA could delete: the operator's delete forgets the record.
		return s.q.Delete(e.ID)
	}), nil
}

// expire deletes entries older than max_age, held ones from the MTA too.
func (s *quarantineService) expire(ctx context.Context, now time.Time) {
	maxAge := time.Duration(*s.cfg.MaxAge)
	if maxAge <= 0 {
		return
	}
	old, err := s.q.List(quarantine.Filter{States: []quarantine.State{quarantine.Held}, Before: now.Add(-maxAge)})
	if err == nil {
		for _, e := range old {
			if _, err := runMTA(ctx, s.cfg.DeleteCommand, e.QueueID); err != nil {
				s.log.Warn("expiring a held message from the MTA failed", "id", e.ID, "err", err)
			}
		}
	}
	n, bytes, err := s.q.Expire(now, maxAge)
	if err != nil {
		s.log.Error("quarantine expiry failed", "err", err)
		return
	}
	if n > 0 {
		s.log.Info("quarantine entries expired", "count", n, "bytes", bytes, "max_age", policy.FormatDuration(maxAge))
		if st, err := s.q.Stats(); err == nil {
			s.mu.Lock()
			s.pending = st.ByKey
			if s.pending == nil {
				s.pending = map[string]int{}
			}
			s.mu.Unlock()
		}
	}
}

// show returns the entry, and the message preview: ours for frozen mail,
// the MTA's (postcat -q) for held mail.
func (s *quarantineService) show(ctx context.Context, id string, raw bool) (quarantine.Entry, []byte, error) {
	e, err := s.q.Get(id)
	if err != nil {
		return e, nil, err
	}
	var body []byte
	switch {
	case e.State == quarantine.Frozen && raw:
		body, err = s.q.Message(id)
	case e.State == quarantine.Frozen:
		var p *quarantine.Preview
		if p, err = s.q.Preview(id, 4096); err == nil {
			body = []byte(p.String())
		}
	case e.State == quarantine.Held:
		body, err = runMTA(ctx, s.cfg.ShowCommand, e.QueueID)
	}
	return e, body, err
}

// ---- daemon wiring ----

// quarantineState is the daemon's quarantine and milter front end.
type quarantineState struct {
	svc        *quarantineService
	milter     *milter.Server
	milterL    net.Listener
	stopExpire context.CancelFunc
}

func (d *daemon) openQuarantine() error {
	q, err := quarantine.New(d.db, quarantine.Options{MaxSize: int64(d.cfg.Quarantine.MaxSize)})
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	svc, err := newQuarantineService(q, d.cfg.Quarantine, d.engine, d.log)
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	d.q = &quarantineState{svc: svc}
	d.metrics.reg.MustRegister(svc.collectors()...)
	ctx, cancel := context.WithCancel(context.Background())
	d.q.stopExpire = cancel
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTicker(time.Hour)
		defer t.Stop()
		svc.expire(ctx, time.Now())
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				svc.expire(ctx, now)
			}
		}
	}()
	return nil
}

// recordHold records a HOLD given through policy delegation.
func (d *daemon) recordHold(_ context.Context, req *policy.Request, dec *policy.Decision) {
	if req.Stage == policy.ViaMilter {
		return // the milter records its own holds and freezes
	}
	d.q.svc.policyHold(req, dec)
}

func (d *daemon) quarantineRoutes(mux *http.ServeMux) {
	registerQuarantineRoutes(mux, func() *quarantineService { return d.q.svc })
}
