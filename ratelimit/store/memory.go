// Package store holds rate-state stores for the policy engine: Memory, a
// sharded in-memory map with a bound on the number of keys, and (in bolt.go)
// its BoltDB persistence. They implement policy.Store without importing it.
//
// Bounded memory (seed 004_801e290009f212ab.txt, "LRU, not TTL"): when a
// shard is full the least recently seen of a random sample of its keys is
// evicted, so random senders cannot exhaust memory, while an offender that
// keeps sending stays recent and is never forgiven by a timer. Keys whose
// rate has decayed to nothing are dropped by Sweep.
package store

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

const (
	numShards = 64
	// evictSample is how many keys are looked at to pick the least recently
	// seen one to evict (approximate LRU, as Redis does).
	evictSample = 8
)

// DefaultMaxKeys is the key bound used when MemoryOptions.MaxKeys is 0.
const DefaultMaxKeys = 4_000_000

type skey struct {
	limit string
	key   string
}

type entry struct {
	state ratelimit.State
	seen  int64 // Unix ns of the last Get or Update
	dirty bool  // changed since the last TakeDirty
}

type shard struct {
	mu sync.Mutex
	m  map[skey]entry
	// deleted records keys removed since the last TakeDirty so a
	// persistent layer can delete them too.
	deleted map[skey]struct{}
}

// MemoryOptions configures NewMemory.
type MemoryOptions struct {
	// MaxKeys bounds the number of (limit, key) pairs kept; 0 means
	// DefaultMaxKeys. The bound is enforced per shard (MaxKeys/64 each).
	MaxKeys int
	// Now returns the current time in Unix nanoseconds for recency
	// bookkeeping; nil means the engine's request time is not available and
	// a monotonic counter is used instead (recency order only matters).
	Now func() int64
}

// Memory is a sharded in-memory rate-state store. It implements
// policy.Store. All methods are safe for concurrent use. Create it with
// NewMemory; the zero value is not usable.
type Memory struct {
	shards   [numShards]shard
	perShard int
	seed     maphash.Seed
	clock    atomic.Int64
	now      func() int64
	evicted  atomic.Int64
	count    atomic.Int64
}

// NewMemory returns an empty store.
func NewMemory(opts MemoryOptions) *Memory {
	max := opts.MaxKeys
	if max <= 0 {
		max = DefaultMaxKeys
	}
	m := &Memory{perShard: max / numShards, seed: maphash.MakeSeed(), now: opts.Now}
	if m.perShard < 1 {
		m.perShard = 1
	}
	for i := range m.shards {
		m.shards[i].m = make(map[skey]entry)
		m.shards[i].deleted = make(map[skey]struct{})
	}
	return m
}

func (m *Memory) tick() int64 {
	if m.now != nil {
		return m.now()
	}
	return m.clock.Add(1)
}

func (m *Memory) shard(limit, key string) *shard {
	var h maphash.Hash
	h.SetSeed(m.seed)
	h.WriteString(limit)
	h.WriteByte(0)
	h.WriteString(key)
	return &m.shards[h.Sum64()%numShards]
}

// Get returns the state of key under limit, or the zero State. It never
// fails.
func (m *Memory) Get(_ context.Context, limit, key string) (ratelimit.State, error) {
	sh := m.shard(limit, key)
	k := skey{limit, key}
	sh.mu.Lock()
	e, ok := sh.m[k]
	if ok {
		e.seen = m.tick()
		sh.m[k] = e
	}
	sh.mu.Unlock()
	return e.state, nil
}

// Update applies fn to the state of key under limit under the shard lock.
// Storing a state into a full shard first evicts the least recently seen of
// a sample of its keys. It never fails.
func (m *Memory) Update(_ context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	sh := m.shard(limit, key)
	k := skey{limit, key}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[k]
	s, store := fn(e.state)
	if !store {
		return nil
	}
	if !ok {
		if len(sh.m) >= m.perShard {
			m.evictLocked(sh)
		}
		m.count.Add(1)
	}
	sh.m[k] = entry{state: s, seen: m.tick(), dirty: true}
	delete(sh.deleted, k)
	return nil
}

func (m *Memory) evictLocked(sh *shard) {
	var victim skey
	oldest := int64(-1)
	n := 0
	for k, e := range sh.m {
		if oldest < 0 || e.seen < oldest {
			victim, oldest = k, e.seen
		}
		n++
		if n >= evictSample {
			break
		}
	}
	if oldest >= 0 {
		delete(sh.m, victim)
		sh.deleted[victim] = struct{}{}
		m.count.Add(-1)
		m.evicted.Add(1)
	}
}

// Delete forgets key under limit and reports whether it had state. It never
// fails.
func (m *Memory) Delete(_ context.Context, limit, key string) (bool, error) {
	sh := m.shard(limit, key)
	k := skey{limit, key}
	sh.mu.Lock()
	_, ok := sh.m[k]
	if ok {
		delete(sh.m, k)
		sh.deleted[k] = struct{}{}
		m.count.Add(-1)
	}
	sh.mu.Unlock()
	return ok, nil
}

// Range calls fn for every stored state until fn returns false. Each shard is
// locked while it is walked, so fn must not call the store.
func (m *Memory) Range(_ context.Context, fn func(limit, key string, s ratelimit.State) bool) error {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if !fn(k.limit, k.key, e.state) {
				sh.mu.Unlock()
				return nil
			}
		}
		sh.mu.Unlock()
	}
	return nil
}

// Len returns the number of (limit, key) pairs held.
func (m *Memory) Len() int { return int(m.count.Load()) }

// Evicted returns how many keys have been evicted to respect MaxKeys.
func (m *Memory) Evicted() int64 { return m.evicted.Load() }

// Sweep drops every state for which negligible returns true (see
// ratelimit.Limit.Negligible) and returns how many were dropped. It locks
// one shard at a time.
func (m *Memory) Sweep(negligible func(limit string, s ratelimit.State) bool) int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if negligible(k.limit, e.state) {
				delete(sh.m, k)
				sh.deleted[k] = struct{}{}
				n++
			}
		}
		sh.mu.Unlock()
	}
	m.count.Add(int64(-n))
	return n
}

// TakeDirty calls put for every state changed and del for every key removed
// since the previous TakeDirty, and clears those marks: the feed of a
// write-behind persistence layer. A shard is locked while it is walked.
func (m *Memory) TakeDirty(put func(limit, key string, s ratelimit.State), del func(limit, key string)) {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.dirty {
				put(k.limit, k.key, e.state)
				e.dirty = false
				sh.m[k] = e
			}
		}
		for k := range sh.deleted {
			del(k.limit, k.key)
		}
		clear(sh.deleted)
		sh.mu.Unlock()
	}
}

// Load stores s for key under limit without marking it dirty: used when
// restoring persisted state at start.
func (m *Memory) Load(limit, key string, s ratelimit.State) {
	sh := m.shard(limit, key)
	k := skey{limit, key}
	sh.mu.Lock()
	if _, ok := sh.m[k]; !ok {
		if len(sh.m) >= m.perShard {
			m.evictLocked(sh)
		}
		m.count.Add(1)
	}
	sh.m[k] = entry{state: s, seen: m.tick()}
	sh.mu.Unlock()
}
