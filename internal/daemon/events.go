package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// eventOptions are the event log's options from the [events] table.
func eventOptions(f *config.File) events.Options {
	return events.Options{MaxAge: time.Duration(f.Events.MaxAge), MaxCount: f.Events.MaxCount,
		ActionMaxAge: time.Duration(f.Events.ActionsMaxAge), ActionMaxCount: f.Events.ActionsMaxCount,
		Coalesce: time.Duration(f.Events.Coalesce)}
}

// recordDecision records a non-Pass decision once per message; it never
// waits for the disk.
func (d *Daemon) recordDecision(now time.Time, req *policy.Request, dec *policy.Decision) {
	if d.events == nil || dec.Action == policy.Pass || dec.Repeated {
		return
	}
	e := events.Event{Time: now, Key: dec.Key, Limit: dec.Limit, Action: dec.Action.String(), Rate: dec.Rate, Max: dec.Max,
		Sender: req.Sender, Client: req.ClientAddress, QueueID: req.QueueID}
	if dec.Fault != nil {
		e.Detail = dec.Reason
	}
	d.events.Record(e)
}

// recordReload records a reload's source, or why it was refused.
func (d *Daemon) recordReload(source string, err error) {
	e := events.Event{Action: events.Reload, Detail: source}
	if err != nil {
		e.Detail = "refused, running configuration kept: " + err.Error()
	}
	d.events.Record(e)
}

// lifecycleActions maps life-cycle events to event actions (Quarantined:
// by Decide).
var lifecycleActions = map[lifecycle.Kind]string{
	lifecycle.Thawed: events.Thaw, lifecycle.Deleted: events.Delete,
	lifecycle.Expired: events.Expire, lifecycle.Released: events.Release, lifecycle.RateReset: events.Reset,
}

// eventRecorder records life-cycle events in the event log (nil: none);
// never blocks.
type eventRecorder struct{ log *events.Log }

// QuarantineEvent implements lifecycle.Events.
func (r eventRecorder) QuarantineEvent(_ context.Context, ev lifecycle.Event) {
	action, ok := lifecycleActions[ev.Kind]
	if !ok {
		return
	}
	detail := ev.Detail
	if ev.Entry.ID != "" {
		detail = strings.TrimSuffix("quarantine "+ev.Entry.ID+": "+ev.Detail, ": ")
	}
	r.log.Record(events.Event{Time: ev.Time, Key: ev.Entry.Key, Limit: ev.Entry.Limit, Action: action,
		Rate: ev.Entry.Rate, Max: ev.Entry.Max, Sender: ev.Entry.Sender, Client: ev.Entry.ClientAddress,
		QueueID: ev.Entry.QueueID, By: ev.By, Detail: detail})
}

// Events is the daemon's event log (nil with [events] enabled = false).
func (d *Daemon) Events() *events.Log { return d.events }

// OpenEvents opens f's event log read-only when no daemon runs; a missing
// state file has no events.
func OpenEvents(f *config.File) (*admin.Local, error) {
	db, err := statedb.Open(f.Server.DBPath(), true, 0)
	if errors.Is(err, statedb.ErrNoFile) {
		return &admin.Local{}, nil
	}
	if err != nil {
		return nil, err
	}
	l, err := events.Open(db, eventOptions(f))
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", f.Server.DBPath(), err)
	}
	return &admin.Local{Events: l, Closer: db.Close}, nil
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

// quarantineNotify is the daemon's life-cycle hook: each event goes to
// the event log (eventRecorder), then to notifications: an alert
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
func (q *quarantineNotify) QuarantineEvent(ctx context.Context, ev lifecycle.Event) {
	eventRecorder{q.d.events}.QuarantineEvent(ctx, ev)
	n := q.d.notifier
	if !n.Enabled() {
		return
	}
	e := notify.Event{Time: ev.Time, Key: ev.Entry.Key, Limit: ev.Entry.Limit, Sender: ev.Entry.Sender,
		Client: ev.Entry.ClientAddress, By: ev.By, Detail: ev.Detail, Count: 1}
	kind, ok := lifecycleKinds[ev.Kind]
	switch {
	case ev.Kind == lifecycle.Quarantined && ev.Alert:
		e.Kind, e.Count, e.Action, e.Rate, e.Max = notify.QuarantineThreshold, ev.Pending, ev.Detail, ev.Entry.Rate, ev.Entry.Max
		n.Notify(e)
		return
	case ev.Kind == lifecycle.ReleaseRun:
		e.Kind, e.Count, e.Sender = notify.Released, ev.Count, ""
		if ev.Detail != "" && ev.Pending > 0 {
			e.Detail = fmt.Sprintf("%s, %s left", ev.Detail, plural.N(ev.Pending, "message"))
		}
		n.Notify(e)
		return
	case !ok:
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
