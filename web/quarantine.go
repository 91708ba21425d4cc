package web

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// maxListed bounds the quarantine page's rows.
const maxListed = 500

// quarantineList lists the messages the filters of `quarantine list`
// (sender, key, limit, state, since) select.
func (s *Server) quarantineList(w http.ResponseWriter, r *http.Request) {
	form := formValues(r.URL.Query(), "sender", "key", "limit", "state", "since")
	lq, err := admin.ParseListQuery(r.URL.Query())
	var f quarantine.Filter
	if err == nil {
		f, err = lq.Filter(s.opts.Now())
	}
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	f.Max = maxListed
	es, err := s.entries(r, f)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	all := map[string]template.URL{} // the bulk actions on every match
	if lq != (admin.ListQuery{}) {
		for op := range confirmOps {
			v := admin.FormQuery(form)
			v.Set("op", op)
			all[op] = template.URL("/quarantine/bulk?" + v.Encode())
		}
	}
	s.render(w, r, "quarantine", map[string]any{"Title": "Quarantine", "Entries": es, "Form": form,
		"Full": len(es) >= maxListed, "Max": maxListed, "Done": done(r), "All": all})
}

// messageView is what the message page shows of the message itself; Raw
// is postcat's listing when no message could be parsed from it.
type messageView struct {
	Header    []quarantine.HeaderField
	Parts     []quarantine.Part
	Text      string
	TextType  string
	Truncated bool
	Raw, Err  string
}

// previewBytes is the text preview's size on the message page.
const previewBytes = 16 << 10

func (s *Server) message(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e, body, err := s.show(r, id)
	if errors.Is(err, quarantine.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no quarantined message %s", id))
		return
	}
	var v messageView
	if err != nil {
		v.Err = err.Error()
	} else {
		v = s.preview(r, e, body)
	}
	s.render(w, r, "message", map[string]any{"Title": "Message " + e.ID, "E": e, "M": v})
}

// preview parses the message (frozen: the stored bytes; held: postcat's
// listing) for a text preview; nothing of it is rendered as HTML.
func (s *Server) preview(r *http.Request, e quarantine.Entry, body []byte) messageView {
	msg := body
	if e.State == quarantine.Held {
		var ok bool
		if msg, ok = postcatMessage(body); !ok {
			return messageView{Raw: termsafe.Text(string(body))}
		}
	}
	p, err := quarantine.PreviewMessage(r.Context(), msg, previewBytes)
	if err != nil {
		return messageView{Err: err.Error(), Raw: termsafe.Text(string(body))}
	}
	return messageView{Header: p.Header, Parts: p.Parts, Text: termsafe.Text(p.Text), TextType: p.TextType, Truncated: p.Truncated}
}

// postcatMessage cuts the message (header and body) out of `postcat -q`
// output: the lines between "*** MESSAGE CONTENTS ... ***" and
// "*** HEADER EXTRACTED ... ***" (or "*** MESSAGE FILE END").
func postcatMessage(out []byte) ([]byte, bool) {
	_, rest, ok := bytes.Cut(out, []byte("*** MESSAGE CONTENTS"))
	if _, rest, ok = bytes.Cut(rest, []byte("\n")); !ok {
		return nil, false
	}
	for _, end := range []string{"\n*** HEADER EXTRACTED", "\n*** MESSAGE FILE END"} {
		if j := bytes.Index(rest, []byte(end)); j >= 0 {
			return rest[:j+1], true
		}
	}
	return rest, true
}

// confirmOps are the quarantine actions and their confirmation wording.
var confirmOps = map[string]opText{
	"thaw":       {"Thaw", "thaw", "Each message is released to its recipients (held mail: postsuper -H; frozen mail: re-injected over SMTP)."},
	"thaw-reset": {"Thaw and reset the rate of", "thaw", "The rate of each key involved is forgotten under every limit, once, then each message is released."},
	"delete":     {"Delete", "delete", "Each message is removed for good (held mail: postsuper -d) and never delivered."},
}

type opText = struct{ Verb, Post, Explain string }

// confirmOp is the request's ?op= for a confirmation page; false when it
// has answered: 403 to a viewer, 400 for an unknown op.
func (s *Server) confirmOp(w http.ResponseWriter, r *http.Request) (string, opText, bool) {
	op := r.URL.Query().Get("op")
	c, ok := confirmOps[op]
	if u := currentUser(r); !u.CanAct() {
		s.forbidden(w, r, "your role ("+string(u.Role)+") may not act; an operator may")
		return op, c, false
	}
	if !ok {
		s.fail(w, r, http.StatusBadRequest, fmt.Errorf("unknown action %q", op))
	}
	return op, c, ok
}

// confirm is the page before a thaw or delete: the envelope and a button.
func (s *Server) confirm(w http.ResponseWriter, r *http.Request) {
	op, c, ok := s.confirmOp(w, r)
	if !ok {
		return
	}
	e, _, err := s.show(r, r.PathValue("id"))
	if errors.Is(err, quarantine.ErrNotFound) {
		s.fail(w, r, http.StatusNotFound, fmt.Errorf("no quarantined message %s", r.PathValue("id")))
		return
	}
	s.render(w, r, "confirm", map[string]any{"Title": c.Verb + " " + e.ID, "E": e, "Op": op, "C": c, "Reset": op == "thaw-reset"})
}
