package web

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Bulk actions: the confirmation page posts the IDs it showed, and the
// action acts on those only (lifecycle claims each first, so one released
// meanwhile fails alone and is never sent twice).

// bulkPreview is how many entries the confirmation page names.
const bulkPreview = 5

// bulkSelect is what the request's query selects: the held and frozen
// entries its filters select, oldest first, only the checked ones ("id")
// if any; at most maxListed, and how many there were.
func (s *Server) bulkSelect(r *http.Request) ([]quarantine.Entry, int, error) {
	v := r.URL.Query()
	lq, err := admin.ParseListQuery(v)
	if err != nil {
		return nil, 0, err
	}
	if lq == (admin.ListQuery{}) && len(v["id"]) == 0 {
		return nil, 0, errors.New("nothing selected: check messages, or filter the page and act on all that match")
	}
	f, err := lq.Filter(s.opts.Now())
	for _, st := range f.States {
		if !st.Pending() && err == nil {
			err = fmt.Errorf("state %s: only held and frozen messages can be thawed or deleted", st)
		}
	}
	if err != nil {
		return nil, 0, err
	}
	f.OldestFirst = true
	es, err := s.entries(r, f)
	if ids := v["id"]; len(ids) > 0 {
		checked := map[string]bool{}
		for _, id := range ids {
			checked[id] = true
		}
		es = slices.DeleteFunc(es, func(e quarantine.Entry) bool { return !checked[e.ID] })
	}
	return es[:min(len(es), maxListed)], len(es), err
}

// bulkConfirm is the page before a bulk thaw or delete: the count, the
// first few messages and a button posting their IDs; 403 to a viewer.
func (s *Server) bulkConfirm(w http.ResponseWriter, r *http.Request) {
	op, c, ok := s.confirmOp(w, r)
	if !ok {
		return
	}
	es, total, err := s.bulkSelect(r)
	if err == nil && len(es) == 0 {
		err = errors.New("no held or frozen message matches: they may have been released or deleted already")
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	q := r.URL.Query()
	q.Del("op")
	q.Del("id")
	first := es[:min(len(es), bulkPreview)]
	s.render(w, r, "bulk", map[string]any{"Title": c.Verb + " messages", "C": c, "Op": op, "Entries": es,
		"First": first, "More": len(es) - len(first), "Total": total,
		"Reset": op == "thaw-reset", "Cancel": template.URL("/quarantine?" + q.Encode())})
}

// bulkAction thaws or deletes the posted IDs that are still held or
// frozen; the others are reported as failed.
func (s *Server) bulkAction(w http.ResponseWriter, r *http.Request) {
	u, op := currentUser(r), r.PathValue("op")
	ids := slices.Compact(slices.Sorted(slices.Values(r.PostForm["id"])))
	if op != "thaw" && op != "delete" || len(ids) == 0 || len(ids) > maxListed {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("%s of %d messages: post 1 to %d IDs to thaw or delete", op, len(ids), maxListed))
		return
	}
	es, err := s.entries(r, quarantine.Filter{OldestFirst: true})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	pending := make(map[string]bool, len(es))
	for _, e := range es {
		pending[e.ID] = true
	}
	sel := lifecycle.Selection{ResetRate: op == "thaw" && r.PostForm.Get("reset") == "1"}
	var gone []lifecycle.Outcome
	for _, id := range ids {
		if pending[id] {
			sel.IDs = append(sel.IDs, id)
		} else {
			gone = append(gone, lifecycle.Outcome{ID: id, Error: "no longer held or frozen"})
		}
	}
	var out []lifecycle.Outcome
	if len(sel.IDs) > 0 {
		// What was confirmed runs to its end if the browser leaves.
		out, err = s.local(u).Act(context.WithoutCancel(r.Context()), op == "thaw", sel)
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	var ok, failed []lifecycle.Outcome
	for _, o := range append(out, gone...) {
		if o.OK {
			ok = append(ok, o)
		} else {
			failed = append(failed, o)
		}
	}
	s.log.Info("console action", "user", u.Name, "action", "bulk "+op, "selected", len(ids),
		"reset_rate", sel.ResetRate, "ok", len(ok), "failed", len(failed))
	past := map[string]string{"thaw": "thawed", "delete": "deleted"}[op]
	s.render(w, r, "bulkdone", map[string]any{"Title": strings.ToUpper(past[:1]) + past[1:] + " messages",
		"Past": past, "OK": ok, "Failed": failed, "Reset": sel.ResetRate})
}
