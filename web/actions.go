package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// by names the operator in logs and events: "NAME (console)".
func by(u user) string { return u.Name + " (console)" }

// local is the services acting as u.
func (s *Server) local(u user) *admin.Local {
	l := s.opts.Services
	l.By, l.Logger = by(u), s.log
	return &l
}

// keyAction runs reset, suspend or resume on the path's key.
func (s *Server) keyAction(w http.ResponseWriter, r *http.Request) {
	u, key, op := currentUser(r), r.PathValue("key"), r.PathValue("op")
	if s.keyHidden(w, r, key) {
		return
	}
	var err error
	switch op {
	case "reset":
		err = s.reset(r, key, r.PostForm.Get("limit"))
	case "suspend", "resume":
		_, err = s.local(u).Suspend(r.Context(), key, op == "resume")
	default:
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q", op))
		return
	}
	if errors.Is(err, policy.ErrUnknownLimit) {
		s.fail(w, r, http.StatusNotFound, err)
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	s.log.Info("console action", "user", u.Name, "action", op, "key", key)
	done := map[string]string{"reset": "reset", "suspend": "suspended", "resume": "resumed"}[op]
	http.Redirect(w, r, "/keys/"+url.PathEscape(key)+"?done="+done, http.StatusSeeOther)
}

// messageAction thaws or deletes the path's message; the life cycle
// records and notifies it.
func (s *Server) messageAction(w http.ResponseWriter, r *http.Request) {
	u, id, op := currentUser(r), r.PathValue("id"), r.PathValue("op")
	if s.entryHidden(w, r, id) {
		return
	}
	if op != "thaw" && op != "delete" {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("unknown action %q", op))
		return
	}
	sel := lifecycle.Selection{IDs: []string{id}, ResetRate: r.PostForm.Get("reset") == "1"}
	out, err := s.local(u).Act(r.Context(), op == "thaw", sel)
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
	if len(out) == 0 {
		failed = []string{"nothing to " + op + ": the message is no longer held or frozen"}
	}
	if len(failed) > 0 {
		s.fail(w, r, http.StatusConflict, errors.New(strings.Join(failed, "; ")))
		return
	}
	http.Redirect(w, r, "/quarantine?done="+url.QueryEscape(op+" "+id), http.StatusSeeOther)
}

// doneText is what an action's redirect may show in the page's banner.
var doneText = regexp.MustCompile(`^(reset|suspended|resumed|(thaw|delete) [0-9a-f]{16})$`)

// done is the request's "done" banner if it is one of doneText, else "".
func done(r *http.Request) string {
	if d := r.URL.Query().Get("done"); doneText.MatchString(d) {
		return d
	}
	return ""
}
