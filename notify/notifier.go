// Package notify tells the postmaster what ratelimitd did (Kind), off the
// request path: a webhook (JSON POST, retried, optionally HMAC-SHA256
// signed) and mail through an SMTP relay (RFC 5321, RFC 5322 text/plain).
//
// Notifier.Notify never blocks: a bounded queue feeds one goroutine;
// overflow is dropped and counted. Users declare, satisfied by *Notifier:
//
//	type notifier interface{ Notify(notify.Event) bool }
package notify

import (
	"cmp"
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"text/template"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Notifier sends events to the webhook and mail recipients from one
// goroutine. Notify is safe for concurrent use and never blocks.
type Notifier struct {
	cfg    Config
	log    *slog.Logger
	hc     *http.Client
	tmpl   map[string]*template.Template // by key of [notify.mail]
	now    func() time.Time
	queue  chan Event
	ctx    context.Context // cancelled by Close when its deadline passes
	cancel context.CancelFunc
	done   chan struct{}

	closeMu sync.RWMutex // orders Notify's send before Close's close of queue
	closed  bool
	mu      sync.Mutex // guards seen
	seen    windows    // (limit, key) refused within its period

	queued, dropped, sent, failed, suppressed atomic.Int64

	mEvents  *prometheus.CounterVec // kind
	mDropped *prometheus.CounterVec // reason
	mSent    *prometheus.CounterVec // channel
	mFailed  *prometheus.CounterVec // channel
}

type seenKey struct{ limit, key string }

// windows is a min-heap of refusal windows on their end, and their keys.
type windows struct {
	keys map[seenKey]bool
	heap []window
}

type window struct {
	k     seenKey
	until time.Time
}

func (w *windows) Len() int           { return len(w.heap) }
func (w *windows) Less(i, j int) bool { return w.heap[i].until.Before(w.heap[j].until) }
func (w *windows) Swap(i, j int)      { w.heap[i], w.heap[j] = w.heap[j], w.heap[i] }
func (w *windows) Push(x any)         { w.heap = append(w.heap, x.(window)) }
func (w *windows) Pop() any {
	e := w.heap[len(w.heap)-1]
	w.heap = w.heap[:len(w.heap)-1]
	return e
}

// Options are New's optional logger, HTTP client and clock.
type Options struct {
	Logger     *slog.Logger
	HTTPClient *http.Client
	Now        func() time.Time
}

// Stats are a Notifier's event and delivery counts since New, and queue length.
type Stats struct {
	Queued     int64 `json:"queued"`
	Dropped    int64 `json:"dropped"`
	Suppressed int64 `json:"suppressed"`
	Sent       int64 `json:"sent"`
	Failed     int64 `json:"failed"`
	Waiting    int   `json:"waiting"`
}

// New validates cfg (with defaults), starts the sender. Errors: cfg's, joined.
func New(cfg Config, o Options) (*Notifier, error) {
	cfg.WithDefaults()
	if errs := cfg.Validate(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	vec := func(name, help, label string, preset ...string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ratelimitd_notify_" + name + "_total", Help: help}, []string{label})
		for _, p := range preset { // every series exists at zero, so that increase() sees the first one
			v.WithLabelValues(p)
		}
		return v
	}
	channels := []string{"webhook", "mail"}
	n := &Notifier{cfg: cfg, log: cmp.Or(o.Logger, slog.New(slog.DiscardHandler)), now: o.Now,
		hc:    cmp.Or(o.HTTPClient, &http.Client{Timeout: time.Duration(cfg.Webhook.Timeout)}),
		queue: make(chan Event, cfg.QueueSize), done: make(chan struct{}), seen: windows{keys: map[seenKey]bool{}},
		mEvents: vec("events", "Events accepted into the notification queue, by kind.", "kind", Kinds...),
		mDropped: vec("dropped", "Events not sent: queue_full, closed, or dedup_full (notify.max_keys reached).", "reason",
			"queue_full", "closed", "dedup_full"),
		mSent:   vec("sent", "Notifications delivered, by channel (webhook, mail).", "channel", channels...),
		mFailed: vec("failed", "Notifications given up after their last attempt, by channel (webhook, mail).", "channel", channels...),
	}
	if n.now == nil {
		n.now = time.Now
	}
	n.tmpl, _ = cfg.Mail.templates()
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.run()
	return n, nil
}

// Enabled reports whether a webhook or mail recipient is configured.
func (n *Notifier) Enabled() bool { return n != nil && n.cfg.enabled() }

// Notify queues e and reports whether it did. A nil Notifier discards.
func (n *Notifier) Notify(e Event) bool {
	if !n.Enabled() || len(n.cfg.Events) > 0 && !slices.Contains(n.cfg.Events, string(e.Kind)) {
		return false
	}
	if e.Time.IsZero() {
		e.Time = n.now()
	}
	if e.Kind == LimitRefused && !n.first(e) {
		return false
	}
	n.closeMu.RLock()
	defer n.closeMu.RUnlock()
	if n.closed {
		n.drop("closed")
		return false
	}
	select {
	case n.queue <- e:
		n.queued.Add(1)
		n.mEvents.WithLabelValues(string(e.Kind)).Inc()
		return true
	default:
		n.drop("queue_full")
		return false
	}
}

func (n *Notifier) drop(reason string) {
	n.dropped.Add(1)
	n.mDropped.WithLabelValues(reason).Inc()
}

// first reports whether e is its key's first refusal by its limit within
// e.Period, and remembers it.
func (n *Notifier) first(e Event) bool {
	period := cmp.Or(max(e.Period, 0), time.Hour)
	k := seenKey{e.Limit, e.Key}
	n.mu.Lock()
	defer n.mu.Unlock()
	w := &n.seen
	for w.Len() > 0 && !e.Time.Before(w.heap[0].until) {
		delete(w.keys, heap.Pop(w).(window).k)
	}
	if w.keys[k] { // its window has not ended: every ended one is gone
		n.suppressed.Add(1)
		return false
	}
	if w.Len() >= n.cfg.MaxKeys {
		n.suppressed.Add(1)
		n.mDropped.WithLabelValues("dedup_full").Inc()
		return false
	}
	w.keys[k] = true
	heap.Push(w, window{k, e.Time.Add(period)})
	return true
}

// Stats returns the counts so far.
func (n *Notifier) Stats() Stats {
	if n == nil {
		return Stats{}
	}
	return Stats{Queued: n.queued.Load(), Dropped: n.dropped.Load(), Suppressed: n.suppressed.Load(),
		Sent: n.sent.Load(), Failed: n.failed.Load(), Waiting: len(n.queue)}
}

// Collectors returns the ratelimitd_notify_* Prometheus metrics.
func (n *Notifier) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.mEvents, n.mDropped, n.mSent, n.mFailed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ratelimitd_notify_queue_length",
			Help: "Events waiting to be sent."}, func() float64 { return float64(len(n.queue)) })}
}

// Close sends the queued events until ctx is done, then abandons the rest
// and returns ctx's error; a second Close returns ErrClosed.
func (n *Notifier) Close(ctx context.Context) error {
	n.closeMu.Lock()
	if n.closed {
		n.closeMu.Unlock()
		return ErrClosed
	}
	n.closed = true
	close(n.queue)
	n.closeMu.Unlock()
	select {
	case <-n.done:
		return nil
	case <-ctx.Done():
		n.cancel() // ends retries and in-flight sends
		<-n.done
		return ctx.Err()
	}
}

func (n *Notifier) run() {
	defer close(n.done)
	defer n.cancel()
	for e := range n.queue {
		if n.ctx.Err() != nil {
			n.failed.Add(1)
			n.log.Error("notification abandoned at shutdown", "event", e.Kind, "key", e.Key)
			continue
		}
		n.deliver(e)
	}
}

// deliver sends e on every configured channel, each with its retries.
func (n *Notifier) deliver(e Event) {
	if n.cfg.Webhook.URL != "" {
		n.result("webhook", e, n.retry(n.cfg.Webhook.Retry, func() (bool, error) { return n.postWebhook(n.ctx, e) }))
	}
	if len(n.cfg.Mail.To) > 0 {
		n.result("mail", e, n.retry(n.cfg.Mail.Retry, func() (bool, error) { return n.sendMail(n.ctx, e, false) }))
		if n.cfg.Mail.NotifySender && e.Kind == LimitRefused && e.Sender != "" {
			n.result("mail", e, n.retry(n.cfg.Mail.Retry, func() (bool, error) { return n.sendMail(n.ctx, e, true) }))
		}
	}
}

func (n *Notifier) result(channel string, e Event, err error) {
	if err == nil {
		n.sent.Add(1)
		n.mSent.WithLabelValues(channel).Inc()
		return
	}
	n.failed.Add(1)
	n.mFailed.WithLabelValues(channel).Inc()
	n.log.Error("notification failed", "channel", channel, "event", e.Kind, "key", e.Key, "err", err)
}

// retry calls try while it fails temporarily, as r says.
func (n *Notifier) retry(r Retry, try func() (temporary bool, err error)) error {
	var err error
	attempts, backoff := r.Attempts, time.Duration(r.Backoff)
	for i := range attempts {
		var temporary bool
		if temporary, err = try(); err == nil || !temporary || i == attempts-1 {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return errors.Join(err, n.ctx.Err())
		case <-t.C:
		}
		backoff = min(2*backoff, time.Duration(r.MaxBackoff))
	}
	return err
}

// ErrClosed is returned by Close when called twice; Notify on a closed
// Notifier drops the event and returns false.
var ErrClosed = errors.New("notify: closed")

// ErrStatus is wrapped by the webhook error for a status other than 2xx.
var ErrStatus = errors.New("notify: webhook answered")
