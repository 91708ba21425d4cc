package policy

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// RecipientSets remembers which recipients each key of a per = "addr"
// limit sent to (ratelimit.AddrSet; Exim's per_addr with unique=). h is
// ratelimit.HashAddr of the lower-cased address. Safe for concurrent use.
type RecipientSets interface {
	Seen(ctx context.Context, limit, key string, h uint64, now time.Time, period time.Duration) (bool, error)
	Add(ctx context.Context, limit, key string, h uint64, now time.Time, period time.Duration, capacity int) error
	Forget(ctx context.Context, limit, key string) (bool, error) // whether there was a set
}

// UseRecipientSets sets the per = "addr" memory; call it before the first
// Evaluate. Without it every recipient counts as new.
func (e *Engine) UseRecipientSets(rs RecipientSets) { e.rcpts = rs }

// addrCost makes a per = "addr" cost 0 for a recipient key has sent to in
// the period, else 1 (a store fault: 1), noting it in p for recordAddrs.
func (e *Engine) addrCost(ctx context.Context, now time.Time, l *limit, key string, req *Request, cost float64, p *probe) float64 {
	if e.rcpts == nil || req.Recipient == "" || (req.ProtocolState != StateRcpt && req.RecipientCount != 1) {
		return cost
	}
	p.addr, p.hasAddr = ratelimit.HashAddr(strings.ToLower(req.Recipient)), true
	seen, err := e.rcpts.Seen(ctx, l.name, key, p.addr, now, l.rl.Period)
	if err != nil || !seen {
		return 1
	}
	return 0
}

// recordAddrs records the recipients whose charge was stored; the first
// store error.
func (e *Engine) recordAddrs(ctx context.Context, now time.Time, probes []probe, items []StackItem, out []StackResult) error {
	var first error
	for i := range probes {
		p := &probes[i]
		if !p.hasAddr || !out[i].Stored || out[i].Err != nil {
			continue
		}
		it := &items[i]
		capacity := int(math.Min(math.Ceil(2*it.Params.Limit), math.MaxInt32))
		if err := e.rcpts.Add(ctx, it.Limit, it.Key, p.addr, now, it.Params.Period, capacity); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// limitOf is the limit measured against (a baseline's learned allowance).
func limitOf(it *StackItem, r *ratelimit.Result) float64 {
	if r.Limit > 0 {
		return r.Limit
	}
	return it.Params.Limit
}
