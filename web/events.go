package web

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
)

// eventsPerPage is the events page's page size.
const eventsPerPage = 100

// eventsPage lists events newest first with the filters of `ratelimitd
// events` (since, until, key, limit, action) and paging by "before"
// (the ID of the last event shown).
func (s *Server) eventsPage(w http.ResponseWriter, r *http.Request) {
	q, form, err := eventFilter(r.URL.Query(), s.opts.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q.Max = eventsPerPage + 1
	evs, err := s.opts.Events.Query(r.Context(), q)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("events: %w", err))
		return
	}
	var next string
	if len(evs) > eventsPerPage {
		evs = evs[:eventsPerPage]
		v := url.Values{}
		for k, x := range form {
			if x != "" {
				v.Set(k, x)
			}
		}
		v.Set("before", evs[len(evs)-1].ID)
		next = "/events?" + v.Encode()
	}
	s.render(w, r, "events", map[string]any{"Title": "Events", "Events": evs, "Form": form, "Next": next,
		"Paged": q.Before != ""})
}

func eventFilter(v url.Values, now time.Time) (events.Query, map[string]string, error) {
	form := map[string]string{"since": v.Get("since"), "until": v.Get("until"), "key": v.Get("key"),
		"limit": v.Get("limit"), "action": v.Get("action")}
	q := events.Query{Key: form["key"], Limit: form["limit"], Before: v.Get("before")}
	var err error
	if q.Since, err = parseWhen(form["since"], now); err != nil {
		return q, form, fmt.Errorf("since: %w", err)
	}
	if q.Until, err = parseWhen(form["until"], now); err != nil {
		return q, form, fmt.Errorf("until: %w", err)
	}
	q.Actions, err = admin.ParseActions(form["action"])
	return q, form, err
}

// parseWhen reads a duration back from now ("24h", "7d") or a time
// (RFC 3339, or "2006-01-02 15:04", "2006-01-02" in UTC); "" is zero.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := human.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is neither a duration (24h) nor a time (2006-01-02 15:04)", s)
}
