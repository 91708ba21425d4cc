package policy

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// LimitInfo describes one configured limit (config check, admin API).
type LimitInfo struct {
	Name        string             `json:"name"`
	Key         []string           `json:"key"`
	Limit       float64            `json:"limit"`
	Period      time.Duration      `json:"period"`
	Per         string             `json:"per"`
	Mode        string             `json:"mode"`
	Action      string             `json:"action"`
	Algorithm   string             `json:"algorithm"`
	HalfLife    time.Duration      `json:"half_life,omitempty"` // EARRRL; 0: Period*ln 2
	CountAt     string             `json:"count_at"`
	Overrides   map[string]float64 `json:"overrides,omitempty"`
	Message     string             `json:"message"`
	Via         []string           `json:"via,omitempty"`
	Factor      float64            `json:"factor,omitempty"`
	Floor       float64            `json:"floor,omitempty"`
	LearnPeriod time.Duration      `json:"learn_period,omitempty"`
}

// Limits returns the configured stack, in order.
func (e *Engine) Limits() []LimitInfo {
	c := e.cfg.Load()
	out := make([]LimitInfo, len(c.limits))
	for i, l := range c.limits {
		out[i] = LimitInfo{Name: l.name, Key: l.key, Limit: l.rl.Limit, Period: l.rl.Period, Per: perNames[l.per],
			Mode: l.rl.Mode.String(), Action: l.action.String(), Algorithm: l.rl.Algorithm.String(),
			CountAt: countAtText[l.per], Overrides: l.overrides, Message: l.message, Via: l.via, HalfLife: l.rl.HalfLife}
		if l.rl.Algorithm == ratelimit.Baseline {
			out[i].Factor, out[i].Floor = cmp.Or(l.rl.Factor, ratelimit.DefaultFactor), l.rl.Floor
			out[i].LearnPeriod = cmp.Or(l.rl.LearnPeriod, ratelimit.DefaultLearnPeriod)
		}
	}
	return out
}

// countAtText describes, per cost unit, when a message is charged.
var countAtText = [...]string{
	perMail:     "once per message, at its first request",
	perRcpt:     "once per recipient (RCPT, else recipient_count)",
	perByte:     "size at the first request, topped up at END-OF-MESSAGE",
	perConn:     "at CONNECT (else once per message)",
	perAddr:     "once per recipient not sent to within the period (RCPT; else the only recipient, or recipient_count as an upper bound)",
	perBounce:   "once per recipient that failed permanently (5.x.x), when the outcome arrives",
	perUnknown:  "once per recipient unknown at its server (5.1.0, 5.1.1, 5.1.10), when the outcome arrives",
	perDeferral: "once per recipient deferred (4.x.x), however often retried, when the outcome arrives",
}

// KeyRate is one limit's view of one key at a given time.
type KeyRate struct {
	Limit  string        `json:"limit"`
	Key    string        `json:"key"`
	Rate   float64       `json:"rate"` // decayed to now, cost per period
	Max    float64       `json:"max"`  // after overrides
	Period time.Duration `json:"period"`
	Per    string        `json:"per"` // the limit's cost unit
	// Refusing: a request of cost 1 now would be refused, for RetryAfter.
	Over       bool            `json:"over"`
	Refusing   bool            `json:"refusing"`
	RetryAfter time.Duration   `json:"retry_after"`
	State      ratelimit.State `json:"state"`
	// Baseline: Max is the learned allowance, Peak the learned peak.
	Baseline bool    `json:"baseline,omitempty"`
	Peak     float64 `json:"peak,omitempty"`
	Cap      float64 `json:"cap,omitempty"`
	// Ratio, MinCount: the ratio form; Rate counts failures, Recipients
	// the recipients and Max the failures permitted.
	Ratio      float64        `json:"ratio,omitempty"`
	MinCount   float64        `json:"min_count,omitempty"`
	Recipients float64        `json:"recipients,omitempty"`
	Converted  *ConvertedView `json:"converted,omitempty"`
	// Answers (Lookup only): this limit answers the key's next request
	// with Action; NextStep: the step of its ladder answering above it.
	Answers  bool   `json:"answers,omitempty"`
	Action   string `json:"action,omitempty"`
	NextStep string `json:"next_step,omitempty"`
}

// Lookup returns, in stack order, every limit's view at now of key (made
// canonical) where it has state. Errors are the store's.
func (e *Engine) Lookup(ctx context.Context, now time.Time, key string) ([]KeyRate, error) {
	c := e.cfg.Load()
	key = c.form.Key(key)
	var out []KeyRate
	answered := false
	for i := range c.limits {
		l := &c.limits[i]
		s, err := e.store.Get(ctx, l.name, key)
		if err != nil {
			return nil, err
		}
		var rs ratelimit.State
		if l.ratio > 0 {
			if rs, err = e.store.Get(ctx, ratioName(l.name), key); err != nil {
				return nil, err
			}
		}
		if s.IsZero() && rs.IsZero() {
			continue
		}
		kr := l.view(key, s, rs, now, e.conversion(l.name), true)
		if kr.Refusing && l.action.Answers() && !answered {
			answered = true
			kr.Answers, kr.Action, kr.NextStep = true, l.action.String(), c.nextStep(i)
		}
		out = append(out, kr)
	}
	return out, nil
}

// conversion returns the store's last conversion of limit's states, or nil.
func (e *Engine) conversion(name string) *Conversion {
	if cs, ok := e.store.(Conversions); ok {
		if c, ok := cs.LastConversion(name); ok {
			return &c
		}
	}
	return nil
}

// view is l's view of key's state s at now, rs its recipients' for a
// ratio limit; conv, back as convertedView.
func (l *limit) view(key string, s, rs ratelimit.State, now time.Time, conv *Conversion, back bool) KeyRate {
	rl := l.params(key)
	kr := KeyRate{Limit: l.name, Key: key, Rate: rl.Rate(s, now), Max: rl.Limit, Period: rl.Period, Per: perNames[l.per], State: s}
	if rl.Algorithm == ratelimit.Baseline {
		b := rl.Baseline(s, now)
		kr.Baseline, kr.Peak, kr.Cap, kr.Max = true, b.Peak, rl.Limit, b.Allowed
	}
	probe := rl // leaky: the wait for a request of cost 1
	probe.Mode = ratelimit.Leaky
	kr.Over = kr.Rate > kr.Max
	if r := probe.Check(s, now, 1); r.Over {
		kr.Refusing, kr.RetryAfter = true, r.RetryAfter
	}
	if conv != nil {
		kr.Converted = l.convertedView(*conv, s, kr.Refusing, now, back)
	}
	kr.Rate, kr.Max, kr.Peak = human.Finite(kr.Rate), human.Finite(kr.Max), human.Finite(kr.Peak)
	if !kr.Baseline {
		kr.State.Rate = human.Finite(kr.State.Rate)
	}
	if l.ratio > 0 { // Rate counts the failures, against ratio times the recipients
		rcpts := l.rl.Rate(rs, now)
		kr.Ratio, kr.MinCount, kr.Recipients = l.ratio, l.minCount, human.Finite(rcpts)
		kr.Max = human.Finite(l.ratio * max(rcpts, l.minCount))
		kr.Over = rcpts >= l.minCount && kr.Rate > l.ratio*rcpts
		kr.Refusing, kr.RetryAfter = kr.Over, 0
		if kr.Over {
			kr.RetryAfter = l.ratioWait(&StackItem{Params: ratelimit.Limit{Limit: l.ratio * rcpts, Period: l.rl.Period}})
		}
	}
	return kr
}

// All returns every configured limit's keys' rates at now (rate list).
func (e *Engine) All(ctx context.Context, now time.Time) ([]KeyRate, error) {
	c := e.cfg.Load()
	byName := make(map[string]*limit, len(c.limits))
	convs := make(map[string]*Conversion, len(c.limits))
	for i := range c.limits {
		byName[c.limits[i].name] = &c.limits[i]
		convs[c.limits[i].name] = e.conversion(c.limits[i].name)
	}
	var out []KeyRate
	type ratioKey struct{ limit, key string }
	ratios := map[ratioKey]*[2]ratelimit.State{} // a ratio limit's failures and recipients
	err := e.store.Range(ctx, func(name, key string, s ratelimit.State) bool {
		if l := byName[name]; l != nil && l.ratio == 0 {
			out = append(out, l.view(key, s, ratelimit.State{}, now, convs[name], false))
		} else if l := c.stateOf(name); l != nil {
			k, j := ratioKey{l.name, key}, 0
			if name != l.name {
				j = 1 // ratioName: the recipients
			}
			if ratios[k] == nil {
				ratios[k] = new([2]ratelimit.State)
			}
			ratios[k][j] = s
		}
		return true
	})
	for k, st := range ratios {
		out = append(out, byName[k.limit].view(k.key, st[0], st[1], now, convs[k.limit], false))
	}
	return out, err
}

// Reset forgets key's rate under limit, or every limit for "", and returns
// how many states went; ErrUnknownLimit for an unknown limit.
func (e *Engine) Reset(ctx context.Context, key, limit string) (int, error) {
	c := e.cfg.Load()
	key = c.form.Key(key)
	n, found := 0, false
	for i := range c.limits {
		l := &c.limits[i]
		if limit != "" && l.name != limit {
			continue
		}
		found = true
		if l.per == perAddr && e.rcpts != nil {
			if _, err := e.rcpts.Forget(ctx, l.name, key); err != nil {
				return n, err
			}
		}
		if l.ratio > 0 {
			if _, err := e.store.Delete(ctx, ratioName(l.name), key); err != nil {
				return n, err
			}
		}
		ok, err := e.store.Delete(ctx, l.name, key)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	if !found {
		return 0, ErrUnknownLimit
	}
	return n, nil
}

// Negligible reports whether s, under the named limit, equals no state
// (ratelimit.Limit.Negligible); states of unknown limits are.
func (e *Engine) Negligible(limit string, s ratelimit.State, now time.Time) bool {
	rl, ok := e.LimitParams(limit)
	return !ok || rl.Negligible(s, now)
}

// MayFreeze reports whether a freeze limit could refuse req (measures its
// front end, finds its key); reads no rate state. Safe for concurrent use.
func (e *Engine) MayFreeze(req *Request) bool {
	c := e.cfg.Load()
	if c.exempt(req) {
		return false
	}
	r := *req
	if r.Recipient == "" && r.RecipientCount > 0 {
		r.Recipient = "recipient@invalid" // any one of them: only presence matters
	}
	for i := range c.limits {
		l := &c.limits[i]
		if l.action == Freeze && (len(l.via) == 0 || slices.Contains(l.via, r.Stage)) && c.keyOf(l, &r) != "" {
			return true
		}
	}
	return false
}

// LimitParams returns c's limits' arithmetic by state name, without
// overrides; the error is Check's.
func LimitParams(c Config) (map[string]ratelimit.Limit, error) {
	cc, err := compile(c)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ratelimit.Limit, len(cc.limits))
	for i := range cc.limits {
		out[cc.limits[i].name] = cc.limits[i].rl
		if cc.limits[i].ratio > 0 {
			out[ratioName(cc.limits[i].name)] = cc.limits[i].rl
		}
	}
	return out, nil
}

// LimitParams returns the running limit's arithmetic; no allocation.
func (e *Engine) LimitParams(name string) (ratelimit.Limit, bool) {
	if l := e.cfg.Load().stateOf(name); l != nil {
		return l.rl, true
	}
	return ratelimit.Limit{}, false
}

// stateOf returns the limit whose states are kept under name (ratioName
// too), or nil.
func (c *compiled) stateOf(name string) *limit {
	for i := range c.limits {
		l := &c.limits[i]
		if l.name == name || l.ratio > 0 && ratioName(l.name) == name {
			return l
		}
	}
	return nil
}
