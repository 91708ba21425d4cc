package web

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Scope is the mail a console user sees and acts on: everything (the zero
// Scope), or a domain operator's sender domains (a subdomain only if
// listed): a message by its sender's or SASL login's domain, a rate key by
// its sasl_username, sender or sender_domain part. Safe for concurrent use.
type Scope struct {
	domains []string
	attrs   map[string][]string // limit name → key attributes
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

// AllowsKey reports whether key is in scope under limit ("": any
// configured limit).
func (sc Scope) AllowsKey(limit, key string) bool {
	if sc.SiteWide() {
		return true
	}
	if limit == "" {
		return slices.ContainsFunc(slices.Collect(maps.Keys(sc.attrs)), func(l string) bool { return sc.AllowsKey(l, key) })
	}
	attrs, parts := sc.attrs[limit], strings.Split(key, "|")
	if len(attrs) != len(parts) {
		return false
	}
	for i, a := range attrs {
		if (a == "sasl_username" || a == "sender") && sc.in(parts[i]) ||
			a == "sender_domain" && slices.Contains(sc.domains, parts[i]) {
			return true
		}
	}
	return false
}

// allowsEvent: a key in scope, or one decision (a coalesced count spans
// senders) of a sender in scope.
func (sc Scope) allowsEvent(e events.Event) bool {
	return sc.AllowsKey(e.Limit, e.Key) || e.Key != "" && e.Count <= 1 && sc.Allows(e.Sender, "")
}

func (sc Scope) allowsEntry(e quarantine.Entry) bool { return sc.Allows(e.Sender, e.SASLUsername) }

func (sc Scope) allowsRate(k policy.KeyRate) bool { return sc.AllowsKey(k.Limit, k.Key) }

// allowsSummary: a key refused under a limit of the scope.
func (sc Scope) allowsSummary(k events.KeySummary) bool {
	return slices.ContainsFunc(k.Limits, func(l string) bool { return sc.AllowsKey(l, k.Key) })
}

// keep returns the elements of xs ok allows; xs itself when site-wide.
func keep[T any](sc Scope, xs []T, ok func(T) bool) []T {
	if sc.SiteWide() {
		return xs
	}
	return slices.DeleteFunc(slices.Clone(xs), func(x T) bool { return !ok(x) })
}

// keyHidden answers 404, as for no such key, for a key out of scope and
// reports whether it did.
func (s *Server) keyHidden(w http.ResponseWriter, r *http.Request, key string) bool {
	if currentUser(r).Scope.AllowsKey("", key) {
		return false
	}
	s.fail(w, r, http.StatusNotFound, fmt.Errorf("no key %s", key))
	return true
}

// show is Quarantine.Show within the request's scope (outside it:
// quarantine.ErrNotFound).
func (s *Server) show(r *http.Request, id string) (quarantine.Entry, []byte, error) {
	e, body, err := s.opts.Services.Quarantine.Show(r.Context(), id, true)
	if !currentUser(r).Scope.allowsEntry(e) {
		return quarantine.Entry{}, nil, quarantine.ErrNotFound
	}
	return e, body, err
}

// entryHidden is keyHidden for a quarantined message.
func (s *Server) entryHidden(w http.ResponseWriter, r *http.Request, id string) bool {
	if currentUser(r).Scope.SiteWide() {
		return false
	}
	if _, _, err := s.show(r, id); !errors.Is(err, quarantine.ErrNotFound) {
		return false
	}
	s.fail(w, r, http.StatusNotFound, fmt.Errorf("no quarantined message %s", id))
	return true
}

// entries is Quarantine.List within the request's scope.
func (s *Server) entries(r *http.Request, f quarantine.Filter) ([]quarantine.Entry, error) {
	sc, n := currentUser(r).Scope, f.Max
	if !sc.SiteWide() {
		f.Max = 0
	}
	es, err := s.opts.Services.Quarantine.List(f)
	if err != nil {
		return nil, fmt.Errorf("quarantine: %w", err)
	}
	es = keep(sc, es, sc.allowsEntry)
	return es[:min(len(es), cmp.Or(n, len(es)))], nil
}

// maxScanned bounds the events a domain operator's query reads.
const maxScanned = events.MaxQuery

// queryEvents is Events.Query within the request's scope: for a domain
// operator, up to q.Max of the maxScanned newest events q selects.
func (s *Server) queryEvents(r *http.Request, q events.Query) ([]events.Event, error) {
	sc := currentUser(r).Scope
	if sc.SiteWide() {
		return s.opts.Services.Events.Query(r.Context(), q)
	}
	want := cmp.Or(q.Max, events.DefaultMax)
	q.Max = events.DefaultMax
	var out []events.Event
	for scanned := 0; len(out) < want && scanned < maxScanned; scanned += q.Max {
		evs, err := s.opts.Services.Events.Query(r.Context(), q)
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
	sc := currentUser(r).Scope
	rs, err := s.opts.Services.RateState.Lookup(r.Context(), s.opts.Now(), key)
	return keep(sc, rs, sc.allowsRate), err
}

// refused is Events.Summary within the request's scope (for a domain
// operator, of the maxScanned keys most refused).
func (s *Server) refused(r *http.Request, q events.Query) ([]events.KeySummary, error) {
	sc, n := currentUser(r).Scope, q.Max
	if !sc.SiteWide() {
		q.Max = maxScanned
	}
	ks, err := s.opts.Services.Events.Summary(r.Context(), q)
	ks = keep(sc, ks, sc.allowsSummary)
	return ks[:min(len(ks), n)], err
}

// health is the quarantine's health; for a domain operator only the
// counts of its held and frozen messages.
func (s *Server) health(r *http.Request) (lifecycle.Health, error) {
	if currentUser(r).Scope.SiteWide() {
		return s.opts.Services.Quarantine.Health(), nil
	}
	es, err := s.entries(r, quarantine.Filter{})
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

// reset forgets key's rate under limit ("": every limit), for a domain
// operator only under limits of the scope (else policy.ErrUnknownLimit).
func (s *Server) reset(r *http.Request, key, limit string) error {
	u := currentUser(r)
	l := s.local(u)
	if u.Scope.SiteWide() {
		_, err := l.Reset(r.Context(), key, limit)
		return err
	}
	if limit != "" && !u.Scope.AllowsKey(limit, key) {
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
