// Package ratestore holds rate-state stores for the policy engine: Memory, a
// sharded in-memory table with a bound on the number of keys, and
// Persistent (bolt.go), which keeps a Memory's state in BoltDB by
// write-behind so a restart, crash or upgrade does not forgive an offender.
// Both implement policy.Store and policy.StackEvaluator (stack.go).
//
// Bounded memory (as the EARRRL write-up advises: LRU, not TTL): when a
// shard is full the least recently seen of a random sample of its keys is
// evicted, so random senders cannot exhaust memory, while an offender that
// keeps sending stays recent and is never forgiven by a timer. A key flood
// does not evict offenders either: keys the Protect predicate (SetProtect)
// reports over or near their limit are never evicted, and when a sample
// holds only such keys the new key is refused (ErrKeyPressure, counted by
// Refused), which the engine answers fail-open. Keys whose rate has decayed
// to nothing are dropped by Sweep.
//
// # Memory layout
//
// A daemon may hold millions of (limit, key) pairs, so Memory avoids Go
// maps and per-entry pointers. Limit names are interned to a 16-bit index.
// Each shard keeps
//
//   - a slab of fixed 32-byte entries (state, key offset and length,
//     last-seen tick, limit index, flags) in chunks of 1024, with a free
//     list; the slab holds no pointers, so the garbage collector never
//     scans it;
//   - an open-addressing hash table of uint32 slots (8-bit hash tag, 24-bit
//     entry index), linear probing with backward-shift deletion, at most
//     3/4 full;
//   - an arena of key bytes, compacted when half of it is garbage. Pairs
//     are placed by the hash of the key alone, so every limit of one key
//     lands in the same shard and probe run, and shares one copy of the
//     key bytes;
//   - once change tracking is on (Persistent, TakeDirty), a list of the
//     entries changed since the last TakeDirty, so a flush costs
//     O(changed keys), not O(keys). A deleted or evicted entry keeps its
//     slot and key bytes, marked dead, until TakeDirty has reported it.
//
// With 1,000,000 keys under two limits (keys like "user0000001") this
// comes to 48 bytes of Go heap per pair, 92 MiB in all
// (TestMemoryFootprint, BenchmarkMemory2M); a map of struct keys took 159.
package ratestore

import (
	"context"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

const (
	shardShift = 58                     // the top 6 bits of a key's hash pick its shard
	numShards  = 1 << (64 - shardShift) // 64
	// evictSample is how many evictable keys are looked at to pick the
	// least recently seen one to evict (approximate LRU, as Redis does);
	// evictScan is how many keys are looked at in all before a full shard
	// refuses a new key because every one of them is protected.
	evictSample = 8
	evictScan   = 64

	chunkBits = 10
	chunkSize = 1 << chunkBits // entries per slab chunk (32 KiB)

	idxBits  = 24 // a table slot is tag<<idxBits | entry index+1
	idxMask  = 1<<idxBits - 1
	maxSlots = idxMask // entry indices are 0..maxSlots-1
	minTable = 16

	// compactMin is the least garbage (bytes) worth compacting an arena
	// for.
	compactMin = 1024
)

// DefaultMaxKeys is the key bound used when MemoryOptions.MaxKeys is 0.
const DefaultMaxKeys = 4_000_000

// MaxKeyLen is the longest key a store accepts, in bytes (BoltDB's key
// limit).
const MaxKeyLen = 32768

// MaxLimits is how many distinct limit names a store can hold. Names are
// interned for the life of the store; they come from the configuration.
const MaxLimits = 1 << 16

// entry flags.
const (
	fLive  = 1 << iota // in the table
	fDirty             // listed in shard.dirty, to be reported by TakeDirty
	fDead              // deleted while tracking; kept until reported
)

// entry is one (limit, key) pair: 32 bytes, no pointers. A free entry has
// flags 0 and keyOff holds the next free index+1.
type entry struct {
	state  ratelimit.State
	keyOff uint32 // offset of the key in shard.arena
	keyLen uint32
	seen   uint32 // recency tick (seconds or operation count), wrapping
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
	// MaxKeys bounds the number of (limit, key) pairs kept; 0 means
	// DefaultMaxKeys. The bound is enforced per shard (MaxKeys/64 each, at
	// most 16,777,214).
	MaxKeys int
	// Now returns the current time in Unix nanoseconds for recency
	// bookkeeping, which is kept at one-second resolution; nil means a
	// per-shard counter of operations is used instead (recency order is
	// all that matters).
	Now func() int64
}

// Memory is a sharded in-memory rate-state store. It implements
// policy.Store. All methods are safe for concurrent use. Create it with
// NewMemory; the zero value is not usable.
type Memory struct {
	shards      [numShards]shard
	perShard    int
	seed        maphash.Seed
	now         func() int64
	limits      registry
	evicted     atomic.Int64
	refused     atomic.Int64
	count       atomic.Int64
	lostDeletes atomic.Int64
	// protect reports keys that must not be evicted (SetProtect); nil
	// protects none.
	protect atomic.Pointer[func(limit string, s ratelimit.State) bool]
}

// NewMemory returns an empty store.
func NewMemory(opts MemoryOptions) *Memory {
	maxKeys := opts.MaxKeys
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	m := &Memory{perShard: min(max(maxKeys/numShards, 1), maxSlots-1), seed: maphash.MakeSeed(), now: opts.Now}
	for i := range m.shards {
		m.shards[i].seed = m.seed
	}
	return m
}

func (m *Memory) shardOf(h uint64) *shard { return &m.shards[h>>shardShift] }

// tick returns the recency stamp of an access now.
func (m *Memory) tick(sh *shard) uint32 {
	if m.now != nil {
		return uint32(m.now() / 1e9)
	}
	sh.clock++
	return sh.clock
}

// current returns the recency stamp of now without counting an access.
func (m *Memory) current(sh *shard) uint32 {
	if m.now != nil {
		return uint32(m.now() / 1e9)
	}
	return sh.clock
}

// Get returns the state of key under limit, or the zero State. It never
// fails.
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
		e.seen = m.tick(sh)
		s = e.state
	}
	sh.mu.Unlock()
	return s, nil
}

// Update applies fn to the state of key under limit under the shard lock.
// Storing a new key's state into a full shard first evicts the least
// recently seen unprotected key of a sample of its keys (see SetProtect).
// It fails for a key longer than MaxKeyLen (ErrKeyTooLong), beyond
// MaxLimits limit names (ErrTooManyLimits) or when a shard's key arena is
// exhausted (ErrFull), without calling fn; and with ErrKeyPressure, after
// calling fn, when a new key's state cannot be stored because the shard is
// full of protected keys (nothing is stored; Refused counts it).
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

// checkKey returns the interned index of limit for storing key:
// ErrKeyTooLong past MaxKeyLen, ErrTooManyLimits past MaxLimits names.
func (m *Memory) checkKey(limit, key string) (uint16, error) {
	if len(key) > MaxKeyLen {
		return 0, ErrKeyTooLong
	}
	return m.limits.intern(limit)
}

// updateLocked is Update's body under the lock of sh, key's shard (h its
// hash, lim its limit's index): it reports whether it stored a new key,
// which may have evicted or moved other entries of sh.
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

// applyAt stores fn's result for entry idx of sh, under sh's lock, when fn
// says to.
func (m *Memory) applyAt(sh *shard, idx uint32, fn func(ratelimit.State) (ratelimit.State, bool)) {
	e := sh.at(idx)
	if s, store := fn(e.state); store {
		e.state = s
		e.seen = m.tick(sh)
		sh.markDirty(idx, e)
	}
}

// Delete forgets key under limit and reports whether it had state. It never
// fails.
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

// Range calls fn for every stored state until fn returns false. Each shard is
// locked while it is walked, so fn must not call the store.
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

// Refused returns how many new keys were not stored because their shard
// was full of protected keys (Update's ErrKeyPressure, and states dropped
// at restore for that reason).
func (m *Memory) Refused() int64 { return m.refused.Load() }

// Cap returns the number of (limit, key) pairs m holds at most: MaxKeys
// rounded down to a multiple of the shard count (64).
func (m *Memory) Cap() int { return m.perShard * numShards }

// SetProtect installs the predicate that protects keys from eviction:
// protect(limit, state) reports a state that must not be evicted to make
// room for a new key (Persistent installs one that protects rates at or
// above ProtectFraction of their limit). It is called under a shard lock
// and must not call the store. nil protects nothing. Safe for concurrent
// use.
func (m *Memory) SetProtect(protect func(limit string, s ratelimit.State) bool) {
	if protect == nil {
		m.protect.Store(nil)
		return
	}
	m.protect.Store(&protect)
}

// Footprint returns the bytes allocated by m's tables, entry slabs, key
// arenas and change lists: the store's share of the heap, without Go's
// allocator and garbage-collector overhead.
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

// Sweep drops every state for which negligible returns true (see
// ratelimit.Limit.Negligible) and returns how many were dropped. It locks
// one shard at a time, and shrinks a shard's table when it is mostly empty.
func (m *Memory) Sweep(negligible func(limit string, s ratelimit.State) bool) int {
	names := m.limits.all()
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for x := range sh.slots {
			e := sh.at(x)
			if e.flags&fLive == 0 || !negligible(m.limits.name(e.lim, &names), e.state) {
				continue
			}
			key := sh.key(e)
			h := maphash.Bytes(sh.seed, key)
			if pos, idx, ok := find(sh, e.lim, key, h); ok && idx == x {
				m.remove(sh, pos, idx, h)
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

// TakeDirty calls put for every state changed and del for every key removed
// since the previous TakeDirty, and clears those marks: the feed of a
// write-behind persistence layer. Changes are recorded from the first
// TakeDirty on (or from NewPersistent); that first call reports every
// state held. Within one call, a key may be reported deleted and then put
// again (deleted and re-created): the last report wins. put and del run
// under a shard lock and must not call the store; the cost is proportional
// to the number of changes, not of keys.
func (m *Memory) TakeDirty(put func(limit, key string, s ratelimit.State), del func(limit, key string)) {
	var names []string
	m.takeDirty(func(lim uint16, key []byte, s ratelimit.State, deleted bool) {
		if deleted {
			del(m.limits.name(lim, &names), string(key))
		} else {
			put(m.limits.name(lim, &names), string(key), s)
		}
	}, nil)
}

// takeDirty is TakeDirty with the interned limit index and the key bytes,
// which are valid only during the call of fn. between, if not nil, is
// called after each shard, with no lock held (Persistent yields the CPU
// there).
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

// startTracking turns change tracking on for every shard, marking all
// states held as changed.
func (m *Memory) startTracking() {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		sh.startTracking()
		sh.mu.Unlock()
	}
}

// LostDeletes returns how many deletions were not reported by TakeDirty
// because a shard ran out of entry slots holding deleted keys (more than
// 16 million deletions in one shard between two TakeDirty calls). Such a
// key's last persisted state may come back after a restart, which is
// stricter, never more forgiving.
func (m *Memory) LostDeletes() int64 { return m.lostDeletes.Load() }

// Load stores s for key under limit without marking it changed: used when
// restoring persisted state at start. It replaces a state already held.
// A state Update would refuse (see its errors) is dropped.
func (m *Memory) Load(limit, key string, s ratelimit.State) {
	if lim, err := m.limits.intern(limit); err == nil {
		load(m, lim, key, s, true)
	}
}

// load stores s for key under limit without marking it changed, replacing
// a state already held only if replace is set. It reports whether s was
// stored.
func load[K keyBytes](m *Memory, lim uint16, key K, s ratelimit.State, replace bool) bool {
	if len(key) > MaxKeyLen {
		return false
	}
	h := hashOf(m.seed, key)
	sh := m.shardOf(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, idx, ok := find(sh, lim, key, h); ok {
		if !replace {
			return false
		}
		e := sh.at(idx)
		e.state = s
		e.seen = m.tick(sh)
		return true
	}
	if !sh.canAppend(len(key)) {
		return false
	}
	if !insert(m, sh, lim, key, h, s, false) {
		m.refused.Add(1)
		return false
	}
	return true
}

type keyBytes interface{ ~string | ~[]byte }

func hashOf[K keyBytes](seed maphash.Seed, key K) uint64 {
	switch k := any(key).(type) {
	case string:
		return maphash.String(seed, k)
	case []byte:
		return maphash.Bytes(seed, k)
	}
	return maphash.String(seed, string(key))
}

func tagOf(h uint64) uint32 { return uint32(h>>50) & 0xff }

// find looks up key under lim, whose hash is h. It returns the table
// position and entry index, or the empty position ending the probe run.
func find[K keyBytes](sh *shard, lim uint16, key K, h uint64) (pos, idx uint32, ok bool) {
	if len(sh.table) == 0 {
		return 0, 0, false
	}
	mask := uint32(len(sh.table) - 1)
	tag := tagOf(h)
	for i := uint32(h) & mask; ; i = (i + 1) & mask {
		s := sh.table[i]
		if s == 0 {
			return i, 0, false
		}
		if s>>idxBits != tag {
			continue
		}
		x := s&idxMask - 1
		e := sh.at(x)
		if e.lim == lim && e.keyLen == uint32(len(key)) && string(sh.key(e)) == string(key) {
			return i, x, true
		}
	}
}

// findKey returns the arena offset of key if some other limit's entry
// holds it.
func findKey[K keyBytes](sh *shard, key K, h uint64) (uint32, bool) {
	mask := uint32(len(sh.table) - 1)
	tag := tagOf(h)
	for i := uint32(h) & mask; ; i = (i + 1) & mask {
		s := sh.table[i]
		if s == 0 {
			return 0, false
		}
		if s>>idxBits != tag {
			continue
		}
		e := sh.at(s&idxMask - 1)
		if e.keyLen == uint32(len(key)) && string(sh.key(e)) == string(key) {
			return e.keyOff, true
		}
	}
}

// insert adds a new entry, evicting first if the shard is full. The caller
// has checked that the key is absent and that canAppend holds. It returns
// false, storing nothing, when the shard is full and no key may be evicted.
func insert[K keyBytes](m *Memory, sh *shard, lim uint16, key K, h uint64, s ratelimit.State, dirty bool) bool {
	if sh.live >= m.perShard {
		if !m.evict(sh) {
			return false
		}
		sh.maybeCompact()
	}
	if (sh.live+1)*4 > len(sh.table)*3 {
		sh.resize(max(minTable, 2*len(sh.table)))
	}
	x, ok := sh.alloc()
	if !ok {
		// Every slot is held by a deleted entry not yet reported: give
		// up reporting them rather than refuse the new state.
		m.lostDeletes.Add(int64(sh.dropDead()))
		x, _ = sh.alloc() // live < perShard < maxSlots: a slot is free now
	}
	off, shared := findKey(sh, key, h)
	if !shared {
		off = uint32(len(sh.arena))
		sh.arena = append(sh.arena, key...)
	}
	mask := uint32(len(sh.table) - 1)
	pos := uint32(h) & mask
	for sh.table[pos] != 0 {
		pos = (pos + 1) & mask
	}
	sh.table[pos] = tagOf(h)<<idxBits | (x + 1)
	e := sh.at(x)
	*e = entry{state: s, keyOff: off, keyLen: uint32(len(key)), seen: m.tick(sh), lim: lim, flags: fLive}
	if dirty {
		sh.markDirty(x, e)
	}
	sh.live++
	m.count.Add(1)
	return true
}

// evict removes the least recently seen of evictSample unprotected entries
// found from a random table position, looking at evictScan entries at
// most. It reports false, removing nothing, when all it looked at are
// protected (SetProtect).
func (m *Memory) evict(sh *shard) bool {
	if sh.live == 0 {
		return true
	}
	var protect func(string, ratelimit.State) bool
	if p := m.protect.Load(); p != nil {
		protect = *p
	}
	var names []string
	now := m.current(sh)
	mask := uint32(len(sh.table) - 1)
	var bestPos uint32
	var bestAge uint32
	found, looked := 0, 0
	for i, n := rand.Uint32()&mask, 0; n < len(sh.table) && found < evictSample && looked < evictScan; i, n = (i+1)&mask, n+1 {
		s := sh.table[i]
		if s == 0 {
			continue
		}
		looked++
		e := sh.at(s&idxMask - 1)
		if protect != nil && protect(m.limits.name(e.lim, &names), e.state) {
			continue
		}
		if age := now - e.seen; found == 0 || age > bestAge {
			bestPos, bestAge = i, age
		}
		found++
	}
	if found == 0 {
		return false
	}
	x := sh.table[bestPos]&idxMask - 1
	m.remove(sh, bestPos, x, maphash.Bytes(sh.seed, sh.key(sh.at(x))))
	m.evicted.Add(1)
	return true
}

// remove takes entry x, at table position pos, out of the table: it is
// freed, or kept dead until TakeDirty reports it when tracking.
func (m *Memory) remove(sh *shard, pos, x uint32, h uint64) {
	sh.unlink(pos)
	sh.live--
	m.count.Add(-1)
	if sh.track {
		e := sh.at(x)
		sh.markDirty(x, e)
		e.flags = fDead | fDirty
		return
	}
	sh.release(x, h)
}

func (sh *shard) at(x uint32) *entry { return &sh.chunks[x>>chunkBits][x&(chunkSize-1)] }

func (sh *shard) key(e *entry) []byte {
	end := e.keyOff + e.keyLen
	return sh.arena[e.keyOff:end:end]
}

// markDirty lists entry x (e) as changed, if tracking and not listed yet.
func (sh *shard) markDirty(x uint32, e *entry) {
	if sh.track && e.flags&fDirty == 0 {
		e.flags |= fDirty
		sh.dirty = append(sh.dirty, x)
	}
}

func (sh *shard) startTracking() {
	if sh.track {
		return
	}
	sh.track = true
	for x := range sh.slots {
		if e := sh.at(x); e.flags&fLive != 0 {
			sh.markDirty(x, e)
		}
	}
}

// canAppend reports whether n more key bytes fit the arena's 32-bit
// offsets, compacting it if that helps.
func (sh *shard) canAppend(n int) bool {
	if len(sh.arena)+n <= math.MaxUint32 {
		return true
	}
	sh.compact()
	return len(sh.arena)+n <= math.MaxUint32
}

// alloc returns a free entry index.
func (sh *shard) alloc() (uint32, bool) {
	if sh.free != 0 {
		x := sh.free - 1
		sh.free = sh.at(x).keyOff
		return x, true
	}
	if sh.slots >= maxSlots {
		return 0, false
	}
	x := sh.slots
	c := int(x >> chunkBits)
	if c == len(sh.chunks) {
		// The first chunk grows from 16 entries, so that a small store
		// stays small; later ones are allocated whole.
		size := chunkSize
		if c == 0 {
			size = 16
		}
		sh.chunks = append(sh.chunks, make([]entry, 0, size))
	}
	if ch := sh.chunks[c]; len(ch) == cap(ch) {
		grown := make([]entry, len(ch), min(2*cap(ch), chunkSize))
		copy(grown, ch)
		sh.chunks[c] = grown
	}
	sh.chunks[c] = sh.chunks[c][:len(sh.chunks[c])+1]
	sh.slots++
	return x, true
}

// release frees entry x, whose key hashes to h and which is no longer in
// the table, accounting its key bytes as garbage unless another entry
// shares them.
func (sh *shard) release(x uint32, h uint64) {
	e := sh.at(x)
	if !sh.shared(e.keyOff, e.keyLen, h) {
		sh.garbage += int(e.keyLen)
	}
	*e = entry{keyOff: sh.free}
	sh.free = x + 1
}

// shared reports whether an entry in the table uses the key bytes at off.
// Entries sharing a key have the same hash, so they are in h's probe run.
func (sh *shard) shared(off, n uint32, h uint64) bool {
	if len(sh.table) == 0 || n == 0 {
		return false
	}
	mask := uint32(len(sh.table) - 1)
	tag := tagOf(h)
	for i := uint32(h) & mask; sh.table[i] != 0; i = (i + 1) & mask {
		if s := sh.table[i]; s>>idxBits == tag {
			if e := sh.at(s&idxMask - 1); e.keyOff == off && e.keyLen == n {
				return true
			}
		}
	}
	return false
}

// dropDead frees every dead entry without reporting it and returns how
// many there were.
func (sh *shard) dropDead() int {
	n := 0
	for _, x := range sh.dirty {
		e := sh.at(x)
		if e.flags&fDead != 0 {
			sh.release(x, maphash.Bytes(sh.seed, sh.key(e)))
			n++
		}
	}
	return n
}

// unlink empties table position pos by backward-shift deletion: entries
// later in the probe run move back unless that would put them before their
// home position.
func (sh *shard) unlink(pos uint32) {
	mask := uint32(len(sh.table) - 1)
	i := pos
	for j := (i + 1) & mask; sh.table[j] != 0; j = (j + 1) & mask {
		e := sh.at(sh.table[j]&idxMask - 1)
		k := uint32(maphash.Bytes(sh.seed, sh.key(e))) & mask
		// The entry at j stays when its home k lies cyclically in (i, j].
		if (i < j && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			sh.table[i] = sh.table[j]
			i = j
		}
	}
	sh.table[i] = 0
}

// tableSize returns the table size for n entries: a power of two at most
// 3/8 full.
func tableSize(n int) int {
	size := minTable
	for n*8 > size*3 {
		size *= 2
	}
	return size
}

// resize rebuilds the table with size positions.
func (sh *shard) resize(size int) {
	old := sh.table
	sh.table = make([]uint32, size)
	mask := uint32(size - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := uint32(maphash.Bytes(sh.seed, sh.key(sh.at(s&idxMask-1)))) & mask
		for sh.table[i] != 0 {
			i = (i + 1) & mask
		}
		sh.table[i] = s
	}
}

func (sh *shard) maybeCompact() {
	if sh.garbage >= compactMin && 2*sh.garbage > len(sh.arena) {
		sh.compact()
	}
}

// compact copies the key bytes still referenced (by live and dead entries)
// to a new arena, keeping shared keys shared.
func (sh *shard) compact() {
	arena := make([]byte, 0, max(len(sh.arena)-sh.garbage, 0))
	moved := make(map[uint64]uint32)
	for x := range sh.slots {
		e := sh.at(x)
		if e.flags&(fLive|fDead) == 0 {
			continue
		}
		k := uint64(e.keyOff)<<32 | uint64(e.keyLen)
		if off, ok := moved[k]; ok {
			e.keyOff = off
			continue
		}
		off := uint32(len(arena))
		arena = append(arena, sh.key(e)...)
		moved[k] = off
		e.keyOff = off
	}
	sh.arena = arena
	sh.garbage = 0
}

// registry interns limit names. Lookups read an immutable map without
// locking; a new name copies it.
type registry struct {
	mu    sync.Mutex
	ids   atomic.Pointer[map[string]uint16]
	names atomic.Pointer[[]string]
}

func (r *registry) lookup(name string) (uint16, bool) {
	if p := r.ids.Load(); p != nil {
		id, ok := (*p)[name]
		return id, ok
	}
	return 0, false
}

func (r *registry) intern(name string) (uint16, error) {
	if id, ok := r.lookup(name); ok {
		return id, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.lookup(name); ok {
		return id, nil
	}
	old := r.all()
	if len(old) >= MaxLimits {
		return 0, ErrTooManyLimits
	}
	names := append(old[:len(old):len(old)], strings.Clone(name))
	ids := make(map[string]uint16, len(names))
	for i, n := range names {
		ids[n] = uint16(i)
	}
	r.names.Store(&names) // before ids: whoever finds an id finds its name
	r.ids.Store(&ids)
	return uint16(len(names) - 1), nil
}

// name returns the name of id, using and refreshing the snapshot *names
// of all (a name interned after the snapshot was taken is looked up anew).
func (r *registry) name(id uint16, names *[]string) string {
	if int(id) >= len(*names) {
		*names = r.all()
	}
	return (*names)[id]
}

// all returns the interned names, indexed by id. The slice is never
// modified.
func (r *registry) all() []string {
	if p := r.names.Load(); p != nil {
		return *p
	}
	return nil
}

// withAllLocked locks every shard, calls swap, and if it returns true
// replaces every state for which conv reports a change with the state conv
// returns (removing it if that is the zero State), marking it changed. It
// returns how many states conv changed. No other operation of m runs in
// between: swap can install what gives the converted states their meaning.
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
			key := sh.key(e)
			h := maphash.Bytes(sh.seed, key)
			if pos, idx, ok := find(sh, e.lim, key, h); ok && idx == x {
				m.remove(sh, pos, idx, h)
			}
		}
		sh.maybeCompact()
	}
	return n
}
