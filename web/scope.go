package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Scope is the mail a console user sees and acts on: everything (the zero
// Scope, a site-wide user), or that of a domain operator's sender domains.
// A message is in scope when its envelope sender's or its SASL login's
// domain is one of them (exactly: a subdomain is not included unless it is
// listed); a rate key when, under its limit's key attributes, a
// sasl_username or sender part has such a domain or a sender_domain part
// is one; a key of no such attribute (a client address) is in no domain.
// Safe for concurrent use.
type Scope struct {
	domains []string
	// attrs are the key attributes of each configured limit.
	attrs map[string][]string
}

// newScope is the scope of domains (none: site-wide) under limits.
func newScope(domains []string, limits []policy.LimitInfo) Scope {
	if len(domains) == 0 {
		return Scope{}
	}
	sc := Scope{domains: domains, attrs: map[string][]string{}}
	for _, l := range limits {
		sc.attrs[l.Name] = l.Key
	}
	return sc
}

// SiteWide reports whether the scope is everything.
func (sc Scope) SiteWide() bool { return sc.domains == nil }

// Domains are the scope's domains (nil: site-wide).
func (sc Scope) Domains() []string { return sc.domains }

// in reports whether the address or login a has a domain of the scope.
func (sc Scope) in(a string) bool {
	a = policy.DefaultKeyForm().Address(a)
	i := strings.LastIndexByte(a, '@')
	return i > 0 && slices.Contains(sc.domains, a[i+1:])
}

// Allows reports whether a message of envelope sender and SASL login
// saslUser ("" if none) is in scope.
func (sc Scope) Allows(sender, saslUser string) bool {
	return sc.SiteWide() || sc.in(sender) || sc.in(saslUser)
}

// AllowsKey reports whether key is in scope under limit ("": under any
// configured limit).
func (sc Scope) AllowsKey(limit, key string) bool {
	if sc.SiteWide() {
		return true
	}
	if limit == "" {
		for l := range sc.attrs {
			if sc.AllowsKey(l, key) {
				return true
			}
		}
		return false
	}
	attrs, parts := sc.attrs[limit], strings.Split(key, "|")
	if len(attrs) != len(parts) {
		return false
	}
	for i, a := range attrs {
		switch a {
		case "sasl_username", "sender":
			if sc.in(parts[i]) {
				return true
			}
		case "sender_domain":
			if slices.Contains(sc.domains, parts[i]) {
				return true
			}
		}
	}
	return false
}

// allowsEvent: an event of a key in scope, or a single decision (not a
// coalesced count, which spans senders) of a sender in scope.
func (sc Scope) allowsEvent(e events.Event) bool {
	return sc.AllowsKey(e.Limit, e.Key) || e.Key != "" && e.Count <= 1 && sc.Allows(e.Sender, "")
}

func (sc Scope) allowsEntry(e quarantine.Entry) bool { return sc.Allows(e.Sender, e.SASLUsername) }

// allowsSummary: a key refused under a limit of the scope.
func (sc Scope) allowsSummary(k events.KeySummary) bool {
	return slices.ContainsFunc(k.Limits, func(l string) bool { return sc.AllowsKey(l, k.Key) })
}

// keep returns the elements of xs ok allows, xs itself for a site-wide
// scope.
func keep[T any](sc Scope, xs []T, ok func(T) bool) []T {
	if sc.SiteWide() {
		return xs
	}
	var out []T
	for _, x := range xs {
		if ok(x) {
			out = append(out, x)
		}
	}
	return out
}

// scopeOf is the scope of the request's user.
func scopeOf(r *http.Request) Scope { return scopeIn(r.Context()) }

// scopeIn is the scope of the user of the request ctx belongs to.
func scopeIn(ctx context.Context) Scope {
	u, _ := ctx.Value(userKey{}).(user)
	return u.Scope
}

// keyHidden answers 404 for a key outside the request's scope, as for a
// key that does not exist, and reports whether it did.
func (s *Server) keyHidden(w http.ResponseWriter, r *http.Request, key string) bool {
	if scopeOf(r).AllowsKey("", key) {
		return false
	}
	s.fail(w, r, http.StatusNotFound, fmt.Errorf("no key %s", key))
	return true
}

// show is Quarantine.Show within the request's scope: a message outside
// it is quarantine.ErrNotFound.
func (s *Server) show(r *http.Request, id string) (quarantine.Entry, []byte, error) {
	e, body, err := s.opts.Quarantine.Show(r.Context(), id, true)
	if !scopeOf(r).allowsEntry(e) {
		return quarantine.Entry{}, nil, quarantine.ErrNotFound
	}
	return e, body, err
}

// entryHidden answers 404 for a message outside the request's domain
// scope, as for one that does not exist, and reports whether it did.
func (s *Server) entryHidden(w http.ResponseWriter, r *http.Request, id string) bool {
	if scopeOf(r).SiteWide() {
		return false
	}
	if _, _, err := s.show(r, id); !errors.Is(err, quarantine.ErrNotFound) {
		return false
	}
	s.fail(w, r, http.StatusNotFound, fmt.Errorf("no quarantined message %s", id))
	return true
}

// list is Quarantine.List within the scope of ctx's request: every page
// and action (bulk ones too, through entries) that selects messages lists
// them here.
func (s *Server) list(ctx context.Context, f quarantine.Filter) ([]quarantine.Entry, error) {
	sc := scopeIn(ctx)
	if sc.SiteWide() {
		return s.opts.Quarantine.List(f)
	}
	n := f.Max
	f.Max = 0
	es, err := s.opts.Quarantine.List(f)
	es = keep(sc, es, sc.allowsEntry)
	if n > 0 && len(es) > n {
		es = es[:n]
	}
	return es, err
}

// maxScanned bounds the events a domain operator's query reads.
const maxScanned = events.MaxQuery

// queryEvents is Events.Query within the request's scope: for a domain
// operator, up to q.Max events of the scope among the maxScanned newest
// that q selects.
func (s *Server) queryEvents(r *http.Request, q events.Query) ([]events.Event, error) {
	sc := scopeOf(r)
	if sc.SiteWide() {
		return s.opts.Events.Query(r.Context(), q)
	}
	want := cmp.Or(q.Max, events.DefaultMax)
	q.Max = events.DefaultMax
	var out []events.Event
	for scanned := 0; len(out) < want && scanned < maxScanned; scanned += q.Max {
		evs, err := s.opts.Events.Query(r.Context(), q)
		if err != nil {
			return nil, err
		}
		out = append(out, keep(sc, evs, sc.allowsEvent)...)
		if len(evs) < q.Max {
			break
		}
		q.Before = evs[len(evs)-1].ID
	}
	return out[:min(len(out), want)], nil
}

// lookup is Rates.Lookup within the request's scope.
func (s *Server) lookup(r *http.Request, key string) ([]policy.KeyRate, error) {
	sc := scopeOf(r)
	rs, err := s.opts.Rates.Lookup(r.Context(), s.opts.Now(), key)
	return keep(sc, rs, func(kr policy.KeyRate) bool { return sc.AllowsKey(kr.Limit, kr.Key) }), err
}

// refused is Events.Summary within the request's scope (for a domain
// operator, of the maxScanned keys most refused).
func (s *Server) refused(r *http.Request, q events.Query) ([]events.KeySummary, error) {
	sc, n := scopeOf(r), q.Max
	if !sc.SiteWide() {
		q.Max = maxScanned
	}
	ks, err := s.opts.Events.Summary(r.Context(), q)
	ks = keep(sc, ks, sc.allowsSummary)
	return ks[:min(len(ks), n)], err
}

// health is the quarantine's health; for a domain operator only the
// counts of its held and frozen messages (the rest is site-wide).
func (s *Server) health(r *http.Request) (lifecycle.Health, error) {
	if scopeOf(r).SiteWide() {
		return s.opts.Quarantine.Health(), nil
	}
	es, err := s.entries(r.Context(), quarantine.Filter{})
	var h lifecycle.Health
	for _, e := range es {
		switch e.State {
		case quarantine.Held:
			h.Held++
		case quarantine.Frozen:
			h.Frozen++
		}
	}
	return h, err
}

// reset forgets key's rate under limit ("": every limit); a domain
// operator's under each limit of the scope only (policy.ErrUnknownLimit
// for another).
func (s *Server) reset(r *http.Request, key, limit string) error {
	sc, l := scopeOf(r), s.local(currentUser(r))
	if sc.SiteWide() {
		_, err := l.Reset(r.Context(), key, limit)
		return err
	}
	if limit != "" && !sc.AllowsKey(limit, key) {
		return fmt.Errorf("%w %q", policy.ErrUnknownLimit, limit)
	}
	rs, err := s.lookup(r, key)
	for _, kr := range rs {
		if err == nil && (limit == "" || kr.Limit == limit) {
			_, err = l.Reset(r.Context(), key, kr.Limit)
		}
	}
	return err
}
