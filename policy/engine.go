package policy

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Cost units of a limit (LimitConfig.Per).
const (
	perMail = iota
	perRcpt
	perByte
	perConn
)

// limit is one compiled [[limit]].
type limit struct {
	name      string
	key       []string
	per       int
	rl        ratelimit.Limit
	action    Action
	message   string
	overrides map[string]float64
	// via restricts the limit to requests of these front ends
	// (Request.Stage); empty means all.
	via []string
	// countAt is the protocol state at which this limit charges its cost;
	// firstOnly means only at the first request of each instance.
	countAt   string
	firstOnly bool
	// probeAtRcpt means that at RCPT, before the cost is charged later, a
	// read-only check refuses a sender already over a defer/reject limit.
	probeAtRcpt bool
}

type compiled struct {
	limits        []limit
	stages        []string
	subnet4       int
	subnet6       int
	warnHeader    string
	exemptNets    []netip.Prefix
	exemptUsers   map[string]bool
	exemptSenders map[string]bool
}

func (c *compiled) hooked(s string) bool { return slices.Contains(c.stages, s) }

// plan decides, from the hooked stages, where each limit charges its cost:
// per_mail once per message at END-OF-MESSAGE (else DATA, else the first
// RCPT of each instance); per_rcpt at each RCPT (else recipient_count at
// DATA or END-OF-MESSAGE); per_byte from size at END-OF-MESSAGE (else DATA,
// else the declared size at the first RCPT); per_conn at CONNECT (else the
// first RCPT of each instance).
func (c *compiled) plan() {
	later := func() (string, bool) {
		switch {
		case c.hooked(StateEndOfMessage):
			return StateEndOfMessage, false
		case c.hooked(StateData):
			return StateData, false
		}
		return StateRcpt, true
	}
	for i := range c.limits {
		l := &c.limits[i]
		switch l.per {
		case perMail, perByte:
			l.countAt, l.firstOnly = later()
		case perRcpt:
			if c.hooked(StateRcpt) {
				l.countAt = StateRcpt
			} else {
				l.countAt, _ = later()
			}
		case perConn:
			if c.hooked(StateConnect) {
				l.countAt = StateConnect
			} else {
				l.countAt, l.firstOnly = StateRcpt, true
			}
		}
		l.probeAtRcpt = l.countAt != StateRcpt && c.hooked(StateRcpt) && (l.action == Defer || l.action == Reject)
	}
}

// Engine evaluates requests against a stack of limits. It is safe for
// concurrent use; Reload swaps the configuration atomically.
type Engine struct {
	cfg       atomic.Pointer[compiled]
	store     Store
	instances instanceSet
}

// NewEngine validates c and returns an Engine keeping rate state in st. The
// error joins every configuration problem found, each wrapping
// ErrInvalidConfig and naming its TOML key.
func NewEngine(c Config, st Store) (*Engine, error) {
	cc, err := compile(c)
	if err != nil {
		return nil, err
	}
	e := &Engine{store: st}
	e.cfg.Store(cc)
	return e, nil
}

// Check validates c as NewEngine would, without building an Engine.
func Check(c Config) error {
	_, err := compile(c)
	return err
}

// Reload validates c and, only if it is valid, makes it the configuration
// of every later Evaluate. Rate state is kept: a limit keeps its state as
// long as its name is unchanged.
func (e *Engine) Reload(c Config) error {
	cc, err := compile(c)
	if err != nil {
		return err
	}
	e.cfg.Store(cc)
	return nil
}

// Store returns the engine's rate-state store.
func (e *Engine) Store() Store { return e.store }

// probe is the per-limit scratch of one evaluation.
type probe struct {
	l       *limit
	rl      ratelimit.Limit
	key     string
	cost    float64
	prev    ratelimit.State
	res     ratelimit.Result
	counted bool
}

// maxStack bounds the stack size handled without allocation.
const maxStack = 8

// Evaluate measures req against every limit that applies at its protocol
// state, at time now, updates the rate state according to each limit's mode
// and the stack's verdict, and returns the strictest action. It never
// returns an error: a store failure or a panic yields a Pass decision with
// Fault set (fail open), which the caller logs and counts.
func (e *Engine) Evaluate(ctx context.Context, now time.Time, req *Request) (d Decision) {
	defer func() {
		if r := recover(); r != nil {
			d = Decision{Reason: "internal error, failing open", Fault: fmt.Errorf("%w: %v", ErrPanic, r)}
		}
	}()
	c := e.cfg.Load()
	if c.exempt(req) {
		return Decision{Reason: "exempt"}
	}
	state := req.ProtocolState
	var buf [maxStack]probe
	probes := buf[:0]
	first, firstKnown := false, false
	for i := range c.limits {
		l := &c.limits[i]
		if len(l.via) > 0 && !slices.Contains(l.via, req.Stage) {
			continue
		}
		p := probe{l: l, rl: l.rl}
		switch {
		case state == l.countAt:
			if l.firstOnly {
				if !firstKnown {
					first, firstKnown = e.instances.first(req.Instance), true
				}
				if !first {
					continue
				}
			}
			p.counted = true
		case state == StateRcpt && l.probeAtRcpt:
		default:
			continue
		}
		p.cost = l.costOf(req, state)
		if p.counted && p.cost <= 0 && l.per != perByte {
			continue
		}
		p.key = c.keyOf(l, req)
		if p.key == "" {
			continue
		}
		if v, ok := l.overrides[p.key]; ok {
			p.rl.Limit = v
		}
		var err error
		if p.prev, err = e.store.Get(ctx, l.name, p.key); err != nil {
			return Decision{Reason: "rate store error, failing open", Fault: err}
		}
		p.res = p.rl.Check(p.prev, now, p.cost)
		probes = append(probes, p)
	}
	if len(probes) == 0 {
		return Decision{}
	}
	verdict, decisive := Pass, -1
	for i := range probes {
		p := &probes[i]
		if !p.res.Over {
			continue
		}
		if p.l.action > verdict || (decisive >= 0 && p.l.action == verdict && p.res.RetryAfter > probes[decisive].res.RetryAfter) {
			verdict, decisive = p.l.action, i
		}
	}
	admitted := verdict.Admits()
	d.Measures = make([]Measure, len(probes))
	for i := range probes {
		p := &probes[i]
		m := &d.Measures[i]
		*m = Measure{Limit: p.l.name, Key: p.key, Cost: p.cost, Before: p.res.Before, After: p.res.Rate,
			Max: p.rl.Limit, Over: p.res.Over, RetryAfter: p.res.RetryAfter}
		if p.res.Over {
			m.Action = p.l.action
		}
		if !p.counted {
			continue
		}
		next, store := p.rl.Next(p.res, admitted)
		if !store {
			continue
		}
		rl, prev, cost := p.rl, p.prev, p.cost
		err := e.store.Update(ctx, p.l.name, p.key, func(old ratelimit.State) (ratelimit.State, bool) {
			if old == prev {
				return next, true
			}
			// Another request for this key was counted since Get:
			// apply this one on top of it so neither is lost.
			return rl.Next(rl.Check(old, now, cost), admitted)
		})
		if err != nil {
			return Decision{Reason: "rate store error, failing open", Fault: err, Measures: d.Measures}
		}
		m.Stored = true
	}
	if decisive < 0 {
		return d
	}
	p := &probes[decisive]
	d.Action = verdict
	d.Limit, d.Key, d.Rate, d.Max, d.RetryAfter = p.l.name, p.key, p.res.Rate, p.rl.Limit, p.res.RetryAfter
	text := expand(p.l.message, p.l.name, p.key, p.res.Rate, p.rl.Limit, p.rl.Period, p.res.RetryAfter)
	d.Text = SanitizeText(text, MaxTextLen)
	d.Reason = fmt.Sprintf("limit %s key %q rate %.2f > %g per %s (%s, %s)", p.l.name, p.key, p.res.Rate,
		p.rl.Limit, FormatDuration(p.rl.Period), p.rl.Mode, p.rl.Algorithm)
	switch verdict {
	case Defer:
		d.Code, d.Enhanced = 450, "4.7.1"
	case Reject:
		d.Code, d.Enhanced = 550, "5.7.1"
	case Warn:
		if c.warnHeader != "" {
			d.Header = SanitizeText(fmt.Sprintf("%s: limit=%s key=%s rate=%s max=%g period=%s", c.warnHeader,
				p.l.name, p.key, formatRate(p.res.Rate), p.rl.Limit, FormatDuration(p.rl.Period)), MaxTextLen)
		}
	}
	return d
}

// costOf is the cost a request charges to l at protocol state state: 1 per
// mail or connection, 1 per RCPT or recipient_count later, size in bytes.
func (l *limit) costOf(req *Request, state string) float64 {
	switch l.per {
	case perRcpt:
		if state == StateRcpt {
			return 1
		}
		return float64(req.RecipientCount)
	case perByte:
		return float64(max(req.Size, 0))
	}
	return 1
}

// keyOf builds the rate key of l for req: the attribute values joined with
// "|", or "" when any is missing (an unauthenticated client is not one big
// empty user). Addresses and names are lower-cased.
func (c *compiled) keyOf(l *limit, req *Request) string {
	if len(l.key) == 1 {
		return c.attr(l.key[0], req)
	}
	parts := make([]string, 0, len(l.key))
	for _, k := range l.key {
		v := c.attr(k, req)
		if v == "" {
			return ""
		}
		parts = append(parts, v)
	}
	return strings.Join(parts, "|")
}

func (c *compiled) attr(name string, req *Request) string {
	switch name {
	case "sasl_username":
		return strings.ToLower(req.SASLUsername)
	case "sender":
		return strings.ToLower(req.Sender)
	case "sender_domain":
		return domainOf(req.Sender)
	case "recipient":
		return strings.ToLower(req.Recipient)
	case "recipient_domain":
		return domainOf(req.Recipient)
	case "client_address":
		return req.ClientAddress
	case "client_subnet":
		a, err := netip.ParseAddr(req.ClientAddress)
		if err != nil {
			return ""
		}
		a = a.Unmap()
		bits := c.subnet6
		if a.Is4() {
			bits = c.subnet4
		}
		p, _ := a.Prefix(bits)
		return p.String()
	case "client_name":
		if req.ClientName == "unknown" {
			return ""
		}
		return strings.ToLower(req.ClientName)
	case "helo_name":
		return strings.ToLower(req.HeloName)
	}
	return ""
}

func domainOf(addr string) string {
	i := strings.LastIndexByte(addr, '@')
	if i < 0 || i == len(addr)-1 {
		return ""
	}
	return strings.ToLower(addr[i+1:])
}

func (c *compiled) exempt(req *Request) bool {
	if len(c.exemptUsers) > 0 && req.SASLUsername != "" && c.exemptUsers[strings.ToLower(req.SASLUsername)] {
		return true
	}
	if len(c.exemptSenders) > 0 && req.Sender != "" {
		s := strings.ToLower(req.Sender)
		if c.exemptSenders[s] {
			return true
		}
		if i := strings.LastIndexByte(s, '@'); i >= 0 && c.exemptSenders[s[i:]] {
			return true
		}
	}
	if len(c.exemptNets) > 0 && req.ClientAddress != "" {
		if a, err := netip.ParseAddr(req.ClientAddress); err == nil {
			a = a.Unmap()
			for _, p := range c.exemptNets {
				if p.Contains(a) {
					return true
				}
			}
		}
	}
	return false
}

func formatRate(r float64) string {
	if r >= 100 {
		return strconv.FormatFloat(r, 'f', 0, 64)
	}
	return strconv.FormatFloat(r, 'f', 1, 64)
}

// expand fills a message template in one pass: {name}, {key}, {rate},
// {limit}, {period}, {retry}; any other {word} is kept as it is. A request
// that no wait can let through (larger than the whole limit) has retry
// "never (message larger than the limit)".
func expand(tmpl, name, key string, rate, lim float64, period, retry time.Duration) string {
	var b strings.Builder
	b.Grow(len(tmpl) + 32)
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		switch word := tmpl[i+1 : i+j]; word {
		case "name":
			b.WriteString(name)
		case "key":
			b.WriteString(key)
		case "rate":
			b.WriteString(formatRate(rate))
		case "limit":
			b.WriteString(strconv.FormatFloat(lim, 'g', -1, 64))
		case "period":
			b.WriteString(FormatDuration(period))
		case "retry":
			if retry >= time.Duration(math.MaxInt64) {
				b.WriteString("never (message larger than the limit)")
			} else {
				b.WriteString(FormatDuration(retry.Round(time.Second)))
			}
		default:
			b.WriteString(tmpl[i : i+j+1])
		}
		tmpl = tmpl[i+j+1:]
	}
}

// instanceSet remembers recently seen Postfix instance values (two
// generations of at most instanceGen entries each) to count per_mail once
// per message when only RCPT is hooked.
type instanceSet struct {
	mu       sync.Mutex
	cur, old map[string]struct{}
}

const instanceGen = 1 << 16

// first reports whether inst is seen for the first time. An empty instance
// is always first.
func (s *instanceSet) first(inst string) bool {
	if inst == "" {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.cur[inst]; ok {
		return false
	}
	if _, ok := s.old[inst]; ok {
		return false
	}
	if s.cur == nil || len(s.cur) >= instanceGen {
		s.old, s.cur = s.cur, make(map[string]struct{})
	}
	s.cur[inst] = struct{}{}
	return true
}
