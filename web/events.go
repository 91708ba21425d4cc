package web

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
)

// eventsPerPage is the events page's page size.
const eventsPerPage = 100

// eventsPage lists events newest first with the filters of `ratelimitd
// events` (since, until, key, limit, action) and paging by "before"
// (the ID of the last event shown).
func (s *Server) eventsPage(w http.ResponseWriter, r *http.Request) {
	form := formValues(r.URL.Query(), "since", "until", "key", "limit", "action")
	q, err := admin.ParseEventQuery(r.URL.Query(), s.opts.Now())
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	if _, err := hex.DecodeString(q.Before); err != nil || len(q.Before) != events.IDLen && q.Before != "" {
		s.fail(w, r, http.StatusBadRequest, errors.New("before: not an event ID"))
		return
	}
	q.Max = eventsPerPage + 1
	evs, err := s.queryEvents(r, q)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, fmt.Errorf("events: %w", err))
		return
	}
	var next string
	if len(evs) > eventsPerPage {
		evs = evs[:eventsPerPage]
		v := admin.FormQuery(form)
		v.Set("before", evs[len(evs)-1].ID)
		next = "/events?" + v.Encode()
	}
	s.render(w, r, "events", map[string]any{"Title": "Events", "Events": group(evs), "Form": form, "Next": next,
		"Paged": q.Before != "", "UntilExample": s.opts.Now().UTC().Truncate(time.Hour).Format("2006-01-02 15:04")})
}

// group joins consecutive decisions (newest first) of one key, limit and
// action into one row: the counts added, Time the oldest's, Last the
// newest's, Rate the highest; the other fields are the oldest's.
func group(evs []events.Event) []events.Event {
	var out []events.Event
	for _, e := range evs {
		e.Count, e.Last = max(e.Count, 1), cmp.Or(e.Last, e.Time)
		if k := len(out) - 1; k >= 0 && slices.Contains(events.Decisions, e.Action) &&
			out[k].Key == e.Key && out[k].Limit == e.Limit && out[k].Action == e.Action {
			e.Count, e.Last, e.Rate = e.Count+out[k].Count, out[k].Last, max(e.Rate, out[k].Rate)
			out[k] = e
			continue
		}
		out = append(out, e)
	}
	return out
}

// formValues are the query parameters keys of v, for a page's filter form.
func formValues(v url.Values, keys ...string) map[string]string {
	form := map[string]string{}
	for _, k := range keys {
		form[k] = v.Get(k)
	}
	return form
}
