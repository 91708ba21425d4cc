package policy

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// RecipientSets remembers which recipients each key of a per = "addr"
// limit sent to in the current or previous period (ratelimit.AddrSet):
// Exim's per_addr with unique= (Exim specification, "Rate limiting").
// Safe for concurrent use.
type RecipientSets interface {
	// Seen reports whether key sent, under limit, to the address of hash
	// h (ratelimit.HashAddr of the lower-cased address) in the current
	// or previous generation of length period at time now.
	Seen(ctx context.Context, limit, key string, h uint64, now time.Time, period time.Duration) (bool, error)
	// Add records that key sent to the address of hash h at now;
	// capacity (addresses per generation) sizes its Bloom filter.
	Add(ctx context.Context, limit, key string, h uint64, now time.Time, period time.Duration, capacity int) error
	// Forget drops key's set under limit and reports whether there was
	// one.
	Forget(ctx context.Context, limit, key string) (bool, error)
}

// UseRecipientSets sets the per = "addr" memory; call it before the first
// Evaluate. Without it every recipient counts as new.
func (e *Engine) UseRecipientSets(rs RecipientSets) { e.rcpts = rs }

// addrCost makes a per = "addr" cost 0 for a recipient key has sent to in
// the period, else 1; a request naming several recipients keeps
// recipient_count. It notes the address in p for recordAddrs.
func (e *Engine) addrCost(ctx context.Context, now time.Time, l *limit, key string, req *Request, cost float64, p *probe) float64 {
	if e.rcpts == nil || req.Recipient == "" || (req.ProtocolState != StateRcpt && req.RecipientCount != 1) {
		return cost
	}
	p.addr, p.hasAddr = ratelimit.HashAddr(strings.ToLower(req.Recipient)), true
	seen, err := e.rcpts.Seen(ctx, l.name, key, p.addr, now, l.rl.Period)
	if err != nil || !seen {
		return 1 // a store fault counts the recipient as new
	}
	return 0
}

// recordAddrs records the recipients whose charge was stored (a leaky
// limit's refused one stays new for the retry); the first store error.
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
