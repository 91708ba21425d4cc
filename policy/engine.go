package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Cost units of a limit (LimitConfig.Per).
const (
	perMail = iota
	perRcpt
	perByte
	perConn
	perAddr
	perBounce // outcomes (outcome.go)
	perUnknown
	perDeferral
)

// limit is one compiled [[limit]].
type limit struct {
	name      string
	idx       int // its place in the stack, from 0
	key       []string
	per       int
	rl        ratelimit.Limit
	action    Action
	message   string
	overrides map[string]float64
	// domainOverrides: overrides has an "@domain" entry.
	domainOverrides bool
	via             []string // the front ends that measure it; empty: all
	// ratio, minCount: an outcome limit's ratio form; ratio 0: a count.
	ratio, minCount float64
}

type compiled struct {
	limits        []limit
	subnet4       int
	subnet6       int
	form          KeyForm
	faults        []storeFault
	omitMeasures  bool
	warnHeader    string
	exemptNets    []netip.Prefix
	exemptUsers   map[string]bool
	exemptSenders map[string]bool
}

// Engine evaluates requests against a stack of limits; safe for concurrent use.
type Engine struct {
	cfg     atomic.Pointer[compiled]
	store   Store
	msgs    msgTable
	seen    stageCounts
	rcpts   RecipientSets // per = "addr" memory; nil: every recipient is new
	scratch sync.Pool     // of *scratch
}

// NewEngine validates c and returns an Engine keeping rate state in st; the
// error joins every problem, each wrapping ErrInvalidConfig with its TOML
// key. A StackEvaluator st decides each stack in one step.
func NewEngine(c Config, st Store) (*Engine, error) {
	e := &Engine{store: st}
	e.scratch.New = func() any { return new(scratch) }
	if err := e.Reload(c); err != nil {
		return nil, err
	}
	return e, nil
}

// Check validates c as NewEngine would, without building an Engine.
func Check(c Config) error {
	_, err := compile(c)
	return err
}

// Reload validates c and only then makes it the configuration; a limit
// keeps its state while its name is unchanged.
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
	ch      *charge // the message's charge record of l; nil without a message
	size    float64 // the message size this request knows
	addr    uint64  // the recipient hash a per = "addr" limit measured
	hasAddr bool
}

// maxStack bounds the stack size handled without allocation.
const maxStack = 8

// scratch is one evaluation's memory handed to the store.
type scratch struct {
	probes [maxStack]probe
	items  [maxStack]StackItem
	out    [maxStack]StackResult
}

// messageState reports whether s is within a mail transaction (MAIL to
// END-OF-MESSAGE).
func messageState(s string) bool { return slices.Contains(stateNames[3:7], s) }

// Evaluate decides req at now: a message is charged once per limit
// whatever stages the MTA asks at, and the first over limit in stack order
// whose action answers decides (docs/limits.md, "Escalation"). A store
// fault is a Pass with Fault set, or the fault table's answer. Safe for
// concurrent use; a panic is left to the front end.
func (e *Engine) Evaluate(ctx context.Context, now time.Time, req *Request) (d Decision) {
	c := e.cfg.Load()
	state := req.ProtocolState
	front := frontIndex(req.Stage)
	e.seen.add(front, state)
	if c.exempt(req) {
		return Decision{Reason: "exempt"}
	}
	inMessage := messageState(state)
	if !inMessage && state != StateConnect {
		return Decision{}
	}
	var m *msgEntry
	var again Decision // the message's verdict (zero: Pass) given again
	settled := false   // d ends the message's request (msgShard.end)
	if inMessage {
		m = e.msgs.get(req, e.seen.joinable(front))
	}
	if m != nil {
		m.mu.Lock()
		defer func() {
			m.mu.Unlock()
			m.shard.end(m, req, settled && !d.Action.Admits(), settled && state == StateEndOfMessage)
		}()
		if v := m.verdict[front]; v != nil && v.Action != Pass {
			again = *v
			again.Repeated = true
		}
		m.charges = slices.Grow(m.charges, len(c.limits))
	}

	sc := e.scratch.Get().(*scratch)
	defer e.scratch.Put(sc)
	probes, items, stackErr := e.stack(ctx, now, c, req, m, front, sc)
	if len(items) == 0 {
		again.Fault, settled = stackErr, true
		return c.faultAnswer(again)
	}
	out := slices.Grow(sc.out[:0], len(items))[:len(items)]
	var err error
	if se, ok := e.store.(StackEvaluator); ok {
		err = se.EvaluateStack(ctx, now, items, again.Action.Refuses(), out)
	} else {
		err = EvaluateStack(ctx, e.store, now, items, again.Action.Refuses(), out)
	}
	if err != nil { // nothing decided: fail open, bookkeeping untouched
		d = Decision{Reason: "rate store error, failing open"}
		if again.Action != Pass {
			d = again
		}
		d.Fault = err
		return c.faultAnswer(d)
	}

	var measures []Measure
	if !c.omitMeasures {
		measures = make([]Measure, len(items))
	}
	msgDecisive, rcptDecisive, fault := decisive(probes, items, out, measures)
	if fault == nil {
		fault = stackErr
	}
	verdictOf := func(i int) Decision {
		return c.verdict(probes[i].l, &items[i], &out[i].Result, e.unknownOf(ctx, now, c, probes[i].l, req, items[i].Key))
	}
	msgVerdict := again
	if msgDecisive >= 0 && c.before(probes[msgDecisive].l, again) {
		msgVerdict = verdictOf(msgDecisive)
	}
	final := msgVerdict
	if rcptDecisive >= 0 && c.before(probes[rcptDecisive].l, msgVerdict) {
		final = verdictOf(rcptDecisive)
	}
	admitted := !final.Action.Refuses()
	for i := range items {
		if out[i].Err == nil {
			probes[i].commit(state, &items[i], admitted)
		}
	}
	if m != nil && msgVerdict.Action != again.Action {
		m.setVerdict(front, msgVerdict)
	}
	if err := e.recordAddrs(ctx, now, probes, items, out); err != nil && fault == nil {
		fault = err
	}
	final.Measures, final.Fault, settled = measures, fault, true
	return c.faultAnswer(final)
}

// storeFault is a row of the fault table: a Pass left by a store fault
// wrapping err is deferred with text.
type storeFault struct {
	err          error
	text, reason string
}

// faultAnswer returns the fault table's answer (on_full, on_redis_error)
// to a Pass that a store fault left, else that Pass with a reason; any
// other decision as it is.
func (c *compiled) faultAnswer(d Decision) Decision {
	if d.Fault == nil || d.Action != Pass {
		return d
	}
	for _, f := range c.faults {
		if errors.Is(d.Fault, f.err) {
			return Decision{Action: Defer, Code: 450, Enhanced: "4.7.1", Text: f.text,
				Reason: f.reason + ": " + d.Fault.Error(), Measures: d.Measures, Fault: d.Fault}
		}
	}
	d.Reason = cmp.Or(d.Reason, "rate store error for some limits")
	return d
}

// stack returns, in sc's memory, a probe and a StackItem for each limit
// that applies to req, and the first store error of a limit left out
// because its state could not be read (a ratio limit's recipients).
func (e *Engine) stack(ctx context.Context, now time.Time, c *compiled, req *Request, m *msgEntry, front int, sc *scratch) ([]probe, []StackItem, error) {
	var first error
	state := req.ProtocolState
	connectSeen := e.seen.get(front, StateConnect) > 0
	probes, items := sc.probes[:0], sc.items[:0]
	for i := range c.limits {
		l := &c.limits[i]
		if len(l.via) > 0 && !slices.Contains(l.via, req.Stage) {
			continue
		}
		p := probe{l: l, ch: m.chargeOf(l.name), size: float64(max(req.Size, 0))}
		cost, count, ok := l.cost(req, state, p.ch, front, connectSeen, p.size)
		if !ok {
			continue
		}
		key := c.keyOf(l, req)
		if key == "" {
			continue
		}
		if l.per == perAddr {
			cost = e.addrCost(ctx, now, l, key, req, cost, &p)
		}
		it := StackItem{Limit: l.name, Key: key, Params: l.params(key), Cost: cost, Count: count, Refuses: l.action.Refuses()}
		if l.ratio > 0 {
			ok, err := e.ratioItem(ctx, now, l, &it)
			if err != nil && first == nil {
				first = err
			}
			if !ok {
				continue
			}
		}
		probes = append(probes, p)
		items = append(items, it)
	}
	return probes, items, first
}

// decisive returns the index of the limit deciding the message's verdict
// and of the one deciding the per_rcpt verdict (-1: none): the first over
// one in stack order whose action answers, else the first over one. It
// fills measures if not nil and returns the first item error.
func decisive(probes []probe, items []StackItem, out []StackResult, measures []Measure) (msgDecisive, rcptDecisive int, fault error) {
	msgDecisive, rcptDecisive = -1, -1
	for i := range items {
		it, r, p := &items[i], &out[i], &probes[i]
		ms := &Measure{} // discarded without measures
		if measures != nil {
			ms = &measures[i]
		}
		*ms = Measure{Limit: it.Limit, Key: it.Key, Cost: it.Cost, Before: r.Result.Before, After: r.Result.Rate,
			Max: limitOf(it, &r.Result), Over: r.Result.Over, RetryAfter: r.Result.RetryAfter, Stored: r.Stored}
		if r.Err != nil {
			if fault == nil {
				fault = r.Err
			}
			ms.Over, ms.RetryAfter = false, 0
			continue
		}
		if !r.Result.Over {
			continue
		}
		ms.Action = p.l.action
		if p.l.action == Pass {
			continue // measure only
		}
		dec := &msgDecisive
		if p.l.per == perRcpt {
			dec = &rcptDecisive
		}
		if *dec < 0 || (p.l.action.Answers() && !probes[*dec].l.action.Answers()) {
			*dec = i
		}
	}
	return msgDecisive, rcptDecisive, fault
}

// before reports whether limit l, over, decides ahead of the verdict d:
// l answers and d does not, or both do alike and l is first in the stack
// (a limit no longer in the stack stays ahead).
func (c *compiled) before(l *limit, d Decision) bool {
	if d.Action == Pass {
		return true
	}
	if l.action.Answers() != d.Action.Answers() {
		return l.action.Answers()
	}
	i := slices.IndexFunc(c.limits, func(o limit) bool { return o.name == d.Limit })
	return i >= 0 && l.idx < i
}

// cost is what req charges l at state given the message's charge ch (nil:
// no message), whether it is counted (else measured only), and whether l
// applies (if not, the others mean nothing).
func (l *limit) cost(req *Request, state string, ch *charge, front int, connectSeen bool, size float64) (float64, bool, bool) {
	if l.outcome() { // would one more failure be over? measured, not counted
		return 1, false, messageState(state)
	}
	switch l.per {
	case perMail, perConn:
		if state == StateConnect {
			return 1, true, l.per == perConn
		}
		return 1, true, (ch == nil || !ch.mail) && !(l.per == perConn && connectSeen)
	case perByte:
		if ch != nil && ch.byteSeen {
			return size - ch.bytes, true, state != StateConnect && size > ch.bytes
		}
		return size, size > 0, state != StateConnect
	case perAddr:
		switch state {
		case StateRcpt:
			return 1, true, true
		case StateData, StateEndOfMessage:
			return float64(req.RecipientCount), true, req.RecipientCount > 0 && (ch == nil || ch.rcpts <= 0 && !ch.mail)
		}
	case perRcpt:
		switch state {
		case StateRcpt:
			if ch == nil {
				return 1, true, true
			}
			ch.rcptsSeen[front]++
			return 1, true, ch.rcptsSeen[front] > ch.rcpts // else charged through the other front end
		case StateData, StateEndOfMessage:
			n := req.RecipientCount
			if ch != nil {
				n -= ch.rcptsOK
			}
			return float64(n), true, n > 0
		}
	}
	return 0, false, false
}

// commit records in the message's charge record what this request charged.
func (p *probe) commit(state string, it *StackItem, admitted bool) {
	ch := p.ch
	if ch == nil {
		return
	}
	switch p.l.per {
	case perMail, perConn:
		ch.mail = true
	case perByte:
		ch.byteSeen = true
		ch.bytes = max(ch.bytes, p.size)
	case perAddr, perRcpt:
		if state == StateRcpt {
			ch.rcpts++
		} else if p.l.per == perAddr {
			ch.mail = true
		}
		if p.l.per == perRcpt && admitted {
			ch.rcptsOK += int(it.Cost) // 1 at RCPT
		}
	}
}

// verdict is the Decision of limit l over with result r; unknown as
// unknownOf.
func (c *compiled) verdict(l *limit, it *StackItem, r *ratelimit.Result, unknown float64) Decision {
	lim, retry := limitOf(it, r), r.RetryAfter
	if l.ratio > 0 {
		retry = l.ratioWait(it)
	}
	// The key is cloned: it may share a Decoder block and is kept long.
	d := Decision{Action: l.action, Limit: l.name, Key: strings.Clone(it.Key), Rate: r.Rate, Max: lim, Period: it.Params.Period,
		RetryAfter: retry, Place: l.idx + 1}
	d.Text = expand(l.message, l.name, it.Key, r.Rate, lim, it.Params.Period, retry)
	d.Reason = fmt.Sprintf("limit %s key %q rate %s > %g per %s (%s, %s)", l.name, it.Key, human.Rate(r.Rate, lim),
		lim, human.Duration(it.Params.Period), it.Params.Mode, it.Params.Algorithm)
	if l.outcome() {
		d.Outcome = l.outcomeText(r.Before, unknown, lim, it.Params.Period)
		d.Reason = fmt.Sprintf("limit %s key %q: %s (%s, %s)", l.name, it.Key, d.Outcome, it.Params.Mode, it.Params.Algorithm)
	}
	switch l.action {
	case Defer:
		d.Code, d.Enhanced = 450, "4.7.1"
	case Reject:
		d.Code, d.Enhanced = 550, "5.7.1"
	case Warn:
		if c.warnHeader != "" {
			d.Header = fmt.Sprintf("%s: limit=%s key=%s rate=%s max=%g period=%s", c.warnHeader,
				l.name, it.Key, human.Rate(r.Rate, lim), lim, human.Duration(it.Params.Period))
		}
	}
	return d
}

// keyOf is l's key for req: the attributes joined with "|", bounded by
// BoundKey; "" when one is missing.
func (c *compiled) keyOf(l *limit, req *Request) string {
	if len(l.key) == 1 {
		return BoundKey(c.attr(l.key[0], req))
	}
	parts := make([]string, 0, len(l.key))
	for _, k := range l.key {
		v := c.attr(k, req)
		if v == "" {
			return ""
		}
		parts = append(parts, v)
	}
	return BoundKey(strings.Join(parts, "|"))
}

func (c *compiled) attr(name string, req *Request) string {
	switch name {
	case "sasl_username":
		return c.form.user(req.SASLUsername)
	case "sender":
		return c.form.Address(req.Sender)
	case "sender_domain":
		return domainOf(req.Sender)
	case "recipient":
		if req.Recipient == "" {
			return ""
		}
		return c.form.Address(req.Recipient)
	case "recipient_domain":
		return domainOf(req.Recipient)
	case "client_address":
		return c.form.Client(req.ClientAddress)
	case "client_subnet":
		a, ok := parseClient(strings.TrimSpace(req.ClientAddress))
		if !ok {
			return ""
		}
		a = c.form.carried(a)
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
	case "local_user":
		return req.LocalUser
	}
	return ""
}

// domainOf returns the canonical domain of an envelope address, or "".
func domainOf(addr string) string {
	addr = stripPath(strings.TrimSpace(addr))
	i := strings.LastIndexByte(addr, '@')
	if i < 0 || i == len(addr)-1 {
		return ""
	}
	return Domain(addr[i+1:])
}

func (c *compiled) exempt(req *Request) bool {
	if len(c.exemptUsers) > 0 && req.SASLUsername != "" && c.exemptUsers[c.form.user(req.SASLUsername)] {
		return true
	}
	if len(c.exemptSenders) > 0 && req.Sender != "" {
		s := BoundKey(c.form.Address(req.Sender))
		if i := strings.LastIndexByte(s, '@'); c.exemptSenders[s] || i >= 0 && c.exemptSenders[s[i:]] {
			return true
		}
	}
	if len(c.exemptNets) == 0 || req.ClientAddress == "" {
		return false
	}
	a, ok := parseClient(strings.TrimSpace(req.ClientAddress))
	a, carried := a.Unmap().WithZone(""), c.form.carried(a)
	return ok && slices.ContainsFunc(c.exemptNets, func(p netip.Prefix) bool { return p.Contains(a) || p.Contains(carried) })
}

// expand fills a message template's {name}, {key}, {rate}, {limit},
// {period} and {retry}; other {words} stay.
func expand(tmpl, name, key string, rate, lim float64, period, retry time.Duration) string {
	return strings.NewReplacer("{name}", name, "{key}", key, "{rate}", human.Rate(rate, lim),
		"{limit}", strconv.FormatFloat(lim, 'g', -1, 64), "{period}", human.Duration(period),
		"{retry}", human.Retry(retry)).Replace(tmpl)
}
