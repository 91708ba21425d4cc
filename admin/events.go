package admin

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
)

// errNoEvents is returned by a Local backend without an event log.
var errNoEvents = errors.New("no event log: [events] enabled = false, or the state file has none")

// eventValues encodes q as the query of GET /v1/events.
func eventValues(q events.Query) url.Values {
	form := map[string]string{"key": q.Key, "limit": q.Limit, "action": strings.Join(q.Actions, ","), "before": q.Before}
	for k, t := range map[string]time.Time{"since": q.Since, "until": q.Until} {
		if !t.IsZero() {
			form[k] = t.Format(time.RFC3339Nano)
		}
	}
	if q.Max != 0 {
		form["max"] = strconv.Itoa(q.Max)
	}
	return FormQuery(form)
}

// FormQuery is the fields of form that are set, as a URL query.
func FormQuery(form map[string]string) url.Values {
	v := url.Values{}
	for k, s := range form {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// ParseEventQuery decodes the query of GET /v1/events: since, until
// (ParseWhen), key, limit, action, max, before.
func ParseEventQuery(v url.Values, now time.Time) (events.Query, error) {
	q := events.Query{Key: v.Get("key"), Limit: v.Get("limit"), Before: v.Get("before")}
	var err error
	for _, f := range []struct {
		name string
		t    *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if *f.t, err = ParseWhen(v.Get(f.name), now.UTC()); err != nil {
			return q, fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if q.Actions, err = ParseActions(v.Get("action")); err != nil {
		return q, err
	}
	if s := v.Get("max"); s != "" {
		if q.Max, err = strconv.Atoi(s); err != nil {
			return q, fmt.Errorf("max: %w", err)
		}
	}
	return q, nil
}

// ParseWhen reads a bound: a period back ("7d"), RFC 3339, "2006-01-02",
// "…T15:04" or "… 15:04[:05]" in now's location; "" is no bound.
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := human.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04", time.DateTime, "2006-01-02 15:04", time.DateOnly} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a period (24h, 7d) nor a time (2025-03-01T12:00:00Z, 2025-03-01 12:00)", s)
}

// ParseActions splits "defer,hold" into actions; errors name the known
// ones.
func ParseActions(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !events.IsAction(a) {
			return nil, fmt.Errorf("unknown action %q: one of %s", a, strings.Join(events.Actions, ", "))
		}
		out = append(out, a)
	}
	return out, nil
}

// EventList implements Backend.
func (l *Local) EventList(ctx context.Context, q events.Query) ([]events.Event, error) {
	ev := l.eventLog()
	if ev == nil {
		return nil, errNoEvents
	}
	es, err := ev.Query(ctx, q)
	if es == nil {
		es = []events.Event{}
	}
	return es, err
}

// EventSummary implements Backend.
func (l *Local) EventSummary(ctx context.Context, q events.Query) ([]events.KeySummary, error) {
	ev := l.eventLog()
	if ev == nil {
		return nil, errNoEvents
	}
	return ev.Summary(ctx, q)
}

// EventList implements Backend.
func (c *Client) EventList(ctx context.Context, q events.Query) ([]events.Event, error) {
	return call[[]events.Event](ctx, c, "GET", "/v1/events?"+eventValues(q).Encode(), nil)
}

// EventSummary implements Backend.
func (c *Client) EventSummary(ctx context.Context, q events.Query) ([]events.KeySummary, error) {
	return call[[]events.KeySummary](ctx, c, "GET", "/v1/events/summary?"+eventValues(q).Encode(), nil)
}
