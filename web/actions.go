package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/notify"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// by names the operator in logs and events: "NAME (console)".
func by(u user) string { return u.Name + " (console)" }

// keyAction runs reset, suspend or resume on the path's key.
func (s *Server) keyAction(w http.ResponseWriter, r *http.Request) {
	u, key, op := currentUser(r), r.PathValue("key"), r.PathValue("op")
	ctx, now := r.Context(), s.opts.Now()
	var done, detail string
	switch op {
	case "reset":
		limit := r.PostForm.Get("limit")
		n, err := s.opts.Rates.Reset(ctx, key, limit)
		if errors.Is(err, policy.ErrUnknownLimit) {
			s.fail(w, r, http.StatusNotFound, fmt.Errorf("no limit named %q", limit))
			return
		}
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		detail = plural.N(n, "rate state") + " removed"
		s.log.Info("rate reset", "key", key, "limit", limit, "removed", n, "by", by(u))
		s.opts.Events.Record(events.Event{Time: now, Key: key, Limit: limit, Action: events.Reset, By: by(u), Detail: detail})
		s.opts.Notify(notify.Event{Kind: notify.RateReset, Key: key, Limit: limit, Count: n, By: by(u)})
		done = "reset"
	case "suspend":
		if err := s.opts.Quarantine.Suspend(key, by(u)); err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		s.opts.Events.Record(events.Event{Time: now, Key: key, Action: events.Suspend, By: by(u), Detail: "automatic release suspended"})
		done = "suspended"
	case "resume":
		was, err := s.opts.Quarantine.Resume(key, by(u))
		if err != nil {
			s.fail(w, r, http.StatusInternalServerError, err)
			return
		}
		detail = "automatic release resumed"
		if !was {
			detail = "automatic release was not suspended"
		}
		s.opts.Events.Record(events.Event{Time: now, Key: key, Action: events.Resume, By: by(u), Detail: detail})
		done = "resumed"
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q", op))
		return
	}
	s.log.Info("console action", "user", u.Name, "action", op, "key", key)
	http.Redirect(w, r, "/keys/"+url.PathEscape(key)+"?done="+done, http.StatusSeeOther)
}

// messageAction thaws or deletes the path's message; the life cycle
// records and notifies it.
func (s *Server) messageAction(w http.ResponseWriter, r *http.Request) {
	u, id, op := currentUser(r), r.PathValue("id"), r.PathValue("op")
	sel := lifecycle.Selection{IDs: []string{id}, By: by(u), ResetRate: r.PostForm.Get("reset") == "1"}
	var out []lifecycle.Outcome
	var err error
	switch op {
	case "thaw":
		out, err = s.opts.Quarantine.Thaw(r.Context(), sel)
	case "delete":
		out, err = s.opts.Quarantine.Delete(r.Context(), sel)
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q", op))
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	var failed []string
	for _, o := range out {
		if !o.OK {
			failed = append(failed, o.ID+": "+o.Error)
		}
	}
	s.log.Info("console action", "user", u.Name, "action", op, "id", id, "reset_rate", sel.ResetRate, "ok", len(failed) == 0)
	if len(failed) > 0 || len(out) == 0 {
		msg := strings.Join(failed, "; ")
		if len(out) == 0 {
			msg = "nothing to " + op + ": the message is no longer held or frozen"
		}
		s.fail(w, r, http.StatusConflict, errors.New(msg))
		return
	}
	http.Redirect(w, r, "/quarantine?done="+url.QueryEscape(op+" "+id), http.StatusSeeOther)
}
