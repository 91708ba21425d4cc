package ratestore

import (
	"context"
	"hash/maphash"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// stackMax is the largest stack EvaluateStack decides under its shards'
// locks; larger ones go through policy.EvaluateStack.
const stackMax = 16

// EvaluateStack decides a request's stack of limits at now
// (policy.StackEvaluator), as policy.EvaluateStack would, under the locks
// of its keys' shards (taken in shard order): one hash per key, no
// allocation once the states exist, and atomic per stack. Stacks over 16
// limits go through policy.EvaluateStack. An item that cannot be stored
// gets out[i].Err as Update returns it; EvaluateStack itself never fails.
func (m *Memory) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if len(items) == 0 {
		return nil
	}
	if len(items) > stackMax {
		return policy.EvaluateStack(ctx, m, now, items, refused, out)
	}
	var hs [stackMax]uint64
	var shards [stackMax]*shard // of each item
	var locked [stackMax]int    // the shard indexes to lock, ascending
	nlocked := 0
	for i := range items {
		if i > 0 && items[i].Key == items[i-1].Key {
			hs[i], shards[i] = hs[i-1], shards[i-1]
			continue
		}
		hs[i] = maphash.String(m.seed, items[i].Key)
		shards[i] = m.shardOf(hs[i])
		x := int(hs[i] >> shardShift)
		j := nlocked
		for j > 0 && locked[j-1] > x {
			j--
		}
		if j > 0 && locked[j-1] == x {
			continue
		}
		copy(locked[j+1:nlocked+1], locked[j:nlocked])
		locked[j] = x
		nlocked++
	}
	for _, x := range locked[:nlocked] {
		m.shards[x].mu.Lock()
	}
	defer func() {
		for _, x := range locked[:nlocked] {
			m.shards[x].mu.Unlock()
		}
	}()
	// Measure every item (Get), remembering where its entry is.
	var idxs [stackMax]uint32
	var found [stackMax]bool
	for i := range items {
		it := &items[i]
		var prev ratelimit.State
		if lim, ok := m.limits.lookup(it.Limit); ok {
			if _, idx, ok := find(shards[i], lim, it.Key, hs[i]); ok {
				sh := shards[i]
				e := sh.at(idx)
				e.seen = m.tick(sh)
				prev = e.state
				idxs[i], found[i] = idx, true
			}
		}
		out[i] = policy.StackResult{Prev: prev, Result: it.Params.Check(prev, now, it.Cost)}
	}
	admitted := ratelimit.StackAdmits(refused, len(items), func(i int) bool {
		return out[i].Result.Over && items[i].Refuses
	})
	// Store the counted items' new states (Update). An entry found above
	// is used where it is until a new key has been stored (which may
	// evict or move entries); after that it is looked up again.
	inserted := false
	for i := range items {
		it := &items[i]
		if !it.Count {
			continue
		}
		next, store := it.Params.Next(out[i].Result, admitted)
		if !store {
			continue
		}
		// Update's function: next when the state is still the one
		// measured (always, unless the stack names one (limit, key)
		// twice), else the request re-applied to the current state.
		prev := out[i].Prev
		apply := func(old ratelimit.State) (ratelimit.State, bool) {
			return it.Params.Reapply(old, prev, next, now, it.Cost, admitted)
		}
		if found[i] && !inserted {
			m.applyAt(shards[i], idxs[i], apply)
			out[i].Stored = true
			continue
		}
		lim, err := m.checkKey(it.Limit, it.Key)
		if err == nil {
			var added bool
			added, err = m.updateLocked(shards[i], lim, it.Key, hs[i], apply)
			inserted = inserted || added
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		out[i].Stored = true
	}
	return nil
}

// EvaluateStack is Memory.EvaluateStack; the next flush writes the
// changes. Read-only, it measures through policy.EvaluateStack, items to
// be stored getting ErrReadOnly.
func (p *Persistent) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if p.opts.ReadOnly {
		return policy.EvaluateStack(ctx, p, now, items, refused, out)
	}
	return p.mem.EvaluateStack(ctx, now, items, refused, out)
}
