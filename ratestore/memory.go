package ratestore

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

const (
	shardShift = 58                     // the top 6 bits of a key's hash pick its shard
	numShards  = 1 << (64 - shardShift) // 64
	// evictSample keys are sampled for LRU eviction; evictScan at most
	// before a shard of protected keys refuses a new one.
	evictSample = 8
	evictScan   = 64

	chunkBits = 10
	chunkSize = 1 << chunkBits // entries per slab chunk (32 KiB)

	idxBits  = 24 // a table slot is tag<<idxBits | entry index+1
	idxMask  = 1<<idxBits - 1
	maxSlots = idxMask // entry indices are 0..maxSlots-1
	minTable = 16

	// compactMin is the least arena garbage (bytes) worth compacting.
	compactMin = 1024
)

// DefaultMaxKeys is the key bound used when MemoryOptions.MaxKeys is 0.
const DefaultMaxKeys = 4_000_000

// MaxKeyLen is the longest key accepted, in bytes (BoltDB's limit).
const MaxKeyLen = 32768

// MaxLimits is how many distinct limit names a store can hold (interned).
const MaxLimits = 1 << 16

// entry flags.
const (
	fLive  = 1 << iota // in the table
	fDirty             // listed in shard.dirty, to be reported by takeDirty
	fDead              // deleted while tracking; kept until reported
)

// entry is one (limit, key) pair, 32 bytes; free: flags 0, keyOff next+1.
type entry struct {
	state  ratelimit.State
	keyOff uint32 // offset of the key in shard.arena
	keyLen uint32
	seen   uint32 // recency: the shard's operation count (tick), wrapping
	lim    uint16 // interned limit name
	flags  uint8
	_      uint8
}

type shard struct {
	mu      sync.Mutex
	seed    maphash.Seed
	table   []uint32
	live    int // entries in the table
	chunks  [][]entry
	slots   uint32 // entries handed out from chunks (high-water mark)
	free    uint32 // head of the free list, index+1; 0 when empty
	arena   []byte
	garbage int // arena bytes no longer referenced (an upper bound)
	dirty   []uint32
	track   bool
	clock   uint32
	_       [64]byte // keep shards' locks off each other's cache lines
}

// MemoryOptions configures NewMemory.
type MemoryOptions struct {
	// MaxKeys bounds the (limit, key) pairs (0: DefaultMaxKeys).
	MaxKeys int
}

// Memory is a sharded in-memory rate-state store implementing
// policy.Store, safe for concurrent use. Create it with NewMemory.
type Memory struct {
	shards   [numShards]shard
	perShard int
	seed     maphash.Seed
	limits   registry
	evicted  atomic.Int64
	refused  atomic.Int64
	count    atomic.Int64
	// protect reports keys that must not be evicted (SetProtect).
	protect atomic.Pointer[func(limit string, s ratelimit.State) bool]
}

// EffectiveMaxKeys returns the pairs a store with MaxKeys n holds at most
// (n rounded down to a multiple of the 64 shards).
func EffectiveMaxKeys(n int) int { return perShard(n) * numShards }

func perShard(maxKeys int) int {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return min(max(maxKeys/numShards, 1), maxSlots-1)
}

// NewMemory returns an empty store.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{perShard: perShard(opts.MaxKeys), seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].seed = m.seed
	}
	return m
}

func (m *Memory) shardOf(h uint64) *shard { return &m.shards[h>>shardShift] }

// tick counts an access to sh and returns the count, its recency stamp.
func (sh *shard) tick() uint32 {
	sh.clock++
	return sh.clock
}

// Get returns the state of key under limit, or the zero State; no error.
func (m *Memory) Get(_ context.Context, limit, key string) (ratelimit.State, error) {
	lim, ok := m.limits.lookup(limit)
	if !ok {
		return ratelimit.State{}, nil
	}
	h := maphash.String(m.seed, key)
	sh := m.shardOf(h)
	var s ratelimit.State
	sh.mu.Lock()
	if _, idx, ok := find(sh, lim, key, h); ok {
		e := sh.at(idx)
		e.seen = sh.tick()
		s = e.state
	}
	sh.mu.Unlock()
	return s, nil
}

// Update applies fn to the state of key under limit under the shard lock,
// evicting for a new key in a full shard. Errors: ErrKeyTooLong,
// ErrTooManyLimits, ErrFull, ErrKeyPressure (nothing stored).
func (m *Memory) Update(_ context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	lim, err := m.checkKey(limit, key)
	if err != nil {
		return err
	}
	h := maphash.String(m.seed, key)
	sh := m.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, err = m.updateLocked(sh, lim, key, h, fn)
	return err
}

// checkKey returns limit's index: ErrKeyTooLong, ErrTooManyLimits.
func (m *Memory) checkKey(limit, key string) (uint16, error) {
	if len(key) > MaxKeyLen {
		return 0, ErrKeyTooLong
	}
	return m.limits.intern(limit)
}

// updateLocked is Update under sh's lock; inserted: a new key stored.
func (m *Memory) updateLocked(sh *shard, lim uint16, key string, h uint64, fn func(ratelimit.State) (ratelimit.State, bool)) (inserted bool, err error) {
	if _, idx, ok := find(sh, lim, key, h); ok {
		m.applyAt(sh, idx, fn)
		return false, nil
	}
	if !sh.canAppend(len(key)) {
		return false, ErrFull
	}
	s, store := fn(ratelimit.State{})
	if !store {
		return false, nil
	}
	if !insert(m, sh, lim, key, h, s, true) {
		m.refused.Add(1)
		return false, ErrKeyPressure
	}
	return true, nil
}

// applyAt stores fn's result for entry idx of sh; under sh's lock.
func (m *Memory) applyAt(sh *shard, idx uint32, fn func(ratelimit.State) (ratelimit.State, bool)) {
	e := sh.at(idx)
	if s, store := fn(e.state); store {
		e.state = s
		e.seen = sh.tick()
		sh.markDirty(idx, e)
	}
}

// Delete forgets key under limit, reporting whether it had state.
func (m *Memory) Delete(_ context.Context, limit, key string) (bool, error) {
	lim, ok := m.limits.lookup(limit)
	if !ok {
		return false, nil
	}
	h := maphash.String(m.seed, key)
	sh := m.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	pos, idx, ok := find(sh, lim, key, h)
	if ok {
		m.remove(sh, pos, idx, h)
		sh.maybeCompact()
	}
	return ok, nil
}

// Range calls fn for every state until false, under shard locks: fn must
// not call the store.
func (m *Memory) Range(_ context.Context, fn func(limit, key string, s ratelimit.State) bool) error {
	names := m.limits.all()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for x := range sh.slots {
			e := sh.at(x)
			if e.flags&fLive == 0 {
				continue
			}
			if !fn(m.limits.name(e.lim, &names), string(sh.key(e)), e.state) {
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

// Refused returns how many new keys were refused for protected keys.
func (m *Memory) Refused() int64 { return m.refused.Load() }

// Cap returns the (limit, key) pairs m holds at most.
func (m *Memory) Cap() int { return m.perShard * numShards }

// SetProtect installs protect, reporting states never evicted (nil: none);
// it runs under a shard lock and must not call the store.
func (m *Memory) SetProtect(protect func(limit string, s ratelimit.State) bool) {
	if protect == nil {
		m.protect.Store(nil)
		return
	}
	m.protect.Store(&protect)
}

// Footprint returns the bytes of m's tables, slabs, arenas and lists.
func (m *Memory) Footprint() int64 {
	var n int64
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += int64(cap(sh.table))*4 + int64(cap(sh.arena)) + int64(cap(sh.dirty))*4
		for _, c := range sh.chunks {
			n += int64(cap(c)) * 32
		}
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every state negligible reports and returns how many.
func (m *Memory) Sweep(negligible func(limit string, s ratelimit.State) bool) int {
	names := m.limits.all()
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for x := range sh.slots {
			e := sh.at(x)
			if e.flags&fLive != 0 && negligible(m.limits.name(e.lim, &names), e.state) && m.removeAt(sh, x) {
				n++
			}
		}
		sh.maybeCompact()
		if sh.live*8 < len(sh.table) && len(sh.table) > minTable {
			sh.resize(tableSize(sh.live))
		}
		sh.mu.Unlock()
	}
	return n
}

// takeDirty calls fn for each state changed or key removed (deleted)
// since the last call, under a shard lock, and clears the marks; between
// runs after each shard.
func (m *Memory) takeDirty(fn func(lim uint16, key []byte, s ratelimit.State, deleted bool), between func()) {
	for i := range m.shards {
		if i > 0 && between != nil {
			between()
		}
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.startTracking()
		for _, x := range sh.dirty {
			e := sh.at(x)
			if e.flags&fDirty == 0 {
				continue // reported earlier in this list, or freed
			}
			e.flags &^= fDirty
			if e.flags&fDead != 0 {
				key := sh.key(e)
				fn(e.lim, key, ratelimit.State{}, true)
				sh.release(x, maphash.Bytes(sh.seed, key))
			} else {
				fn(e.lim, sh.key(e), e.state, false)
			}
		}
		if cap(sh.dirty) > 4096 && len(sh.dirty) < cap(sh.dirty)/4 {
			sh.dirty = nil
		} else {
			sh.dirty = sh.dirty[:0]
		}
		sh.maybeCompact()
		sh.mu.Unlock()
	}
}

// startTracking turns change tracking on, marking all states changed.
func (m *Memory) startTracking() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.startTracking()
		sh.mu.Unlock()
	}
}

// load stores s for key under lim if the key has none, without marking it
// changed; it reports whether stored.
func (m *Memory) load(lim uint16, key []byte, s ratelimit.State) bool {
	if len(key) > MaxKeyLen {
		return false
	}
	h := maphash.Bytes(m.seed, key)
	sh := m.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, _, ok := find(sh, lim, key, h); ok || !sh.canAppend(len(key)) {
		return false
	}
	if !insert(m, sh, lim, key, h, s, false) {
		m.refused.Add(1)
		return false
	}
	return true
}

// withAllLocked calls swap with every shard locked; if true, applies conv
// to every state and returns how many changed.
func (m *Memory) withAllLocked(swap func() bool, conv func(limit string, s ratelimit.State) (ratelimit.State, bool)) int {
	for i := range m.shards {
		m.shards[i].mu.Lock()
	}
	defer func() {
		for i := range m.shards {
			m.shards[i].mu.Unlock()
		}
	}()
	if !swap() {
		return 0
	}
	names := m.limits.all()
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		for x := range sh.slots {
			e := sh.at(x)
			if e.flags&fLive == 0 {
				continue
			}
			s, ok := conv(m.limits.name(e.lim, &names), e.state)
			if !ok {
				continue
			}
			n++
			if !s.IsZero() {
				e.state = s
				sh.markDirty(x, e)
				continue
			}
			m.removeAt(sh, x)
		}
		sh.maybeCompact()
	}
	return n
}

// removeAt removes live entry x of sh, reporting whether it was in the table.
func (m *Memory) removeAt(sh *shard, x uint32) bool {
	e := sh.at(x)
	key := sh.key(e)
	h := maphash.Bytes(sh.seed, key)
	pos, idx, ok := find(sh, e.lim, key, h)
	if !ok || idx != x {
		return false
	}
	m.remove(sh, pos, idx, h)
	return true
}
