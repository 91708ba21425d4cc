package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// startNotify starts the [notify] sender (changes need a restart).
func (d *Daemon) startNotify() error {
	n, err := notify.New(d.cfg.Notify, notify.Options{Logger: d.log})
	if err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	d.notifier = n
	d.metrics.Registry().MustRegister(n.Collectors()...)
	return nil
}

// notifyRefusal queues limit_refused for a decision that refused, held or
// froze; Notify never blocks.
func (d *Daemon) notifyRefusal(req *policy.Request, dec *policy.Decision) {
	if !d.notifier.Enabled() || dec.Fault != nil || dec.Limit == "" || dec.Action == policy.Pass || dec.Action == policy.Warn {
		return
	}
	d.notifier.Notify(notify.Event{Kind: notify.LimitRefused, Key: dec.Key, Limit: dec.Limit, Period: dec.Period,
		Action: dec.Action.String(), Rate: dec.Rate, Max: dec.Max, Outcome: dec.Outcome, Sender: req.Sender, Client: req.ClientAddress,
		Detail: dec.Text})
}

// quarantineNotify turns life-cycle events into notifications: an alert
// threshold, a drip release per key and run, and thaw, delete and expiry
// one per kind, key and actor over coalesceWindow.
type quarantineNotify struct {
	d *Daemon

	mu      sync.Mutex
	pending map[coalesceKey]*notify.Event
}

type coalesceKey struct {
	kind    notify.Kind
	key, by string
}

// coalesceWindow gathers operator-action events; maxCoalesce groups at most.
const (
	coalesceWindow = 2 * time.Second
	maxCoalesce    = 1024
)

var lifecycleKinds = map[lifecycle.Kind]notify.Kind{
	lifecycle.Thawed: notify.Thawed, lifecycle.Deleted: notify.Deleted, lifecycle.Expired: notify.Expired,
}

// QuarantineEvent implements lifecycle.Events. It never blocks.
func (q *quarantineNotify) QuarantineEvent(_ context.Context, ev lifecycle.Event) {
	n := q.d.notifier
	if !n.Enabled() {
		return
	}
	e := notify.Event{Time: ev.Time, Key: ev.Entry.Key, Limit: ev.Entry.Limit, Sender: ev.Entry.Sender,
		Client: ev.Entry.ClientAddress, By: ev.By, Detail: ev.Detail, Count: 1}
	if ev.Kind == lifecycle.Quarantined {
		if !ev.Alert {
			return
		}
		e.Kind, e.Count, e.Action, e.Rate, e.Max = notify.QuarantineThreshold, ev.Pending, ev.Detail, ev.Entry.Rate, ev.Entry.Max
		n.Notify(e)
		return
	}
	if ev.Kind == lifecycle.ReleaseRun {
		e.Kind, e.Count, e.Sender = notify.Released, ev.Count, ""
		if ev.Detail != "" && ev.Pending > 0 {
			e.Detail = fmt.Sprintf("%s, %s left", ev.Detail, plural.N(ev.Pending, "message"))
		}
		n.Notify(e)
		return
	}
	kind, ok := lifecycleKinds[ev.Kind]
	if !ok {
		return
	}
	e.Kind, e.Sender = kind, "" // a group may span senders
	ck := coalesceKey{kind: kind, key: e.Key, by: e.By}
	q.mu.Lock()
	if q.pending == nil {
		q.pending = make(map[coalesceKey]*notify.Event)
	}
	if g, ok := q.pending[ck]; ok {
		g.Count++
		q.mu.Unlock()
		return
	}
	if len(q.pending) >= maxCoalesce {
		q.mu.Unlock()
		n.Notify(e)
		return
	}
	q.pending[ck] = &e
	q.mu.Unlock()
	time.AfterFunc(coalesceWindow, func() { q.flush(ck) })
}

func (q *quarantineNotify) flush(ck coalesceKey) {
	q.mu.Lock()
	e, ok := q.pending[ck]
	delete(q.pending, ck)
	q.mu.Unlock()
	if ok {
		q.d.notifier.Notify(*e)
	}
}

// flushAll sends every gathered event now (at shutdown).
func (q *quarantineNotify) flushAll() {
	q.mu.Lock()
	groups := q.pending
	q.pending = nil
	q.mu.Unlock()
	for _, e := range groups {
		q.d.notifier.Notify(*e)
	}
}
