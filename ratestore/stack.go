package ratestore

import (
	"context"
	"hash/maphash"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// stackMax is the largest stack EvaluateStack decides itself.
const stackMax = 16

// EvaluateStack decides a stack of limits at now as policy.EvaluateStack
// would, atomically under its keys' shard locks (policy.StackEvaluator).
// Items that cannot be stored get out[i].Err; no error itself.
func (m *Memory) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if len(items) == 0 {
		return nil
	}
	if len(items) > stackMax {
		return policy.EvaluateStack(ctx, m, now, items, refused, out)
	}
	var hs [stackMax]uint64
	var shards [stackMax]*shard // of each item
	var lockBuf [stackMax]int
	locked := lockBuf[:0] // the shard indexes to lock, ascending
	for i := range items {
		if i > 0 && items[i].Key == items[i-1].Key {
			hs[i], shards[i] = hs[i-1], shards[i-1]
			continue
		}
		hs[i] = maphash.String(m.seed, items[i].Key)
		shards[i] = m.shardOf(hs[i])
		if j, held := slices.BinarySearch(locked, int(hs[i]>>shardShift)); !held {
			locked = slices.Insert(locked, j, int(hs[i]>>shardShift))
		}
	}
	for _, x := range locked {
		m.shards[x].mu.Lock()
	}
	defer func() {
		for _, x := range locked {
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
				e.seen = sh.tick()
				prev = e.state
				idxs[i], found[i] = idx, true
			}
		}
		out[i] = policy.StackResult{Prev: prev, Result: it.Params.Check(prev, now, it.Cost)}
	}
	admitted := ratelimit.StackAdmits(refused, len(items), func(i int) bool {
		return out[i].Result.Over && items[i].Refuses
	})
	// Store the new states; after an insertion entries are looked up anew.
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
		// next if the state is as measured, else re-applied.
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

// EvaluateStack is Memory.EvaluateStack (read-only: items get ErrReadOnly).
func (p *Persistent) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if p.opts.ReadOnly {
		return policy.EvaluateStack(ctx, p, now, items, refused, out)
	}
	return p.mem.EvaluateStack(ctx, now, items, refused, out)
}
