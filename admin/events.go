package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
)

// errNoEvents is returned by a Local backend without an event log (events
// off, or a backend opened for other commands).
var errNoEvents = errors.New("no event log: [events] enabled = false, or the state file has none")

// eventValues encodes q as the query of GET /v1/events.
func eventValues(q events.Query) url.Values {
	v := url.Values{}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.Format(time.RFC3339Nano))
	}
	for k, s := range map[string]string{"key": q.Key, "limit": q.Limit, "action": strings.Join(q.Actions, ","), "before": q.Before} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Max != 0 {
		v.Set("max", strconv.Itoa(q.Max))
	}
	return v
}

// parseEventQuery decodes the query of GET /v1/events: since and until
// (RFC 3339), key, limit, action (comma-separated), max, before.
func parseEventQuery(v url.Values) (events.Query, error) {
	q := events.Query{Key: v.Get("key"), Limit: v.Get("limit"), Before: v.Get("before")}
	var err error
	for name, t := range map[string]*time.Time{"since": &q.Since, "until": &q.Until} {
		if s := v.Get(name); s != "" {
			if *t, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return q, fmt.Errorf("%s: %w", name, err)
			}
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

// ParseActions splits a comma-separated list of event actions
// ("defer,hold"); "" is none. Errors: an unknown action (the error names
// the known ones).
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

func (s *Server) eventRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		q, err := parseEventQuery(r.URL.Query())
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		es, err := s.local(r).EventList(r.Context(), q)
		if err != nil {
			fail(w, eventErrorCode(err), err)
			return
		}
		writeJSON(w, http.StatusOK, es)
	})
	mux.HandleFunc("GET /v1/events/summary", func(w http.ResponseWriter, r *http.Request) {
		q, err := parseEventQuery(r.URL.Query())
		if err != nil {
			fail(w, http.StatusBadRequest, err)
			return
		}
		ks, err := s.local(r).EventSummary(r.Context(), q)
		if err != nil {
			fail(w, eventErrorCode(err), err)
			return
		}
		writeJSON(w, http.StatusOK, ks)
	})
}

func eventErrorCode(err error) int {
	if errors.Is(err, errNoEvents) {
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
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
