package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
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

// openEvents opens the event log, unless [events] is off.
func (d *Daemon) openEvents() error {
	if !d.cfg.Events.On() {
		return nil
	}
	l, err := events.Open(d.db, eventOptions(d.cfg))
	if err != nil {
		return fmt.Errorf("%s: %w", d.cfg.Server.DBPath(), err)
	}
	d.events = l
	d.cleanup = append(d.cleanup, func() { l.Close() })
	d.flusher.Add("event log", l.Tick)
	return nil
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

// lifecycleEvents sends life-cycle events to each member.
type lifecycleEvents []lifecycle.Events

// QuarantineEvent implements lifecycle.Events.
func (ls lifecycleEvents) QuarantineEvent(ctx context.Context, ev lifecycle.Event) {
	for _, l := range ls {
		l.QuarantineEvent(ctx, ev)
	}
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
