package policy

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// RecipientSets remembers, for the limits with per = "addr", which
// recipient addresses each key has sent to recently: one
// ratelimit.AddrSet per (limit, key), whose generations are the limit's
// period long. Such a limit charges a recipient 1 when the key has not
// sent to it in the current or previous period, else 0 (Exim's per_addr
// with unique=, Exim specification chapter "Rate limiting"). ratelimit/
// store.Recipients implements it. Implementations must be safe for
// concurrent use.
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

// UseRecipientSets makes rs the memory of the per = "addr" limits. Call it
// before the first Evaluate. Without it, every recipient of a per = "addr"
// limit counts as new (it counts like per = "rcpt": over, never under).
func (e *Engine) UseRecipientSets(rs RecipientSets) { e.rcpts = rs }

// addrCost turns the cost (*limit).cost chose for a per = "addr" limit
// into the unique-recipient cost: the recipient of this RCPT (or the only
// one of a DATA/END-OF-MESSAGE request with recipient_count 1) costs 0
// when key has sent to it within the period, else 1. A DATA or
// END-OF-MESSAGE request with several recipients, which does not name
// them, keeps recipient_count as an upper bound. It notes the address in p
// for recordAddrs.
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

// recordAddrs records the recipients of the per = "addr" items whose
// charge was stored (admitted, or counted by a strict or forgiving
// limit), so a leaky limit's refused recipient stays new for the retry.
// It returns the first store error.
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

// limitOf is the limit a measure was made against: the learned allowance
// for a baseline limit, else the configured one after overrides.
func limitOf(it *StackItem, r *ratelimit.Result) float64 {
	if r.Limit > 0 {
		return r.Limit
	}
	return it.Params.Limit
}
