package ratestore

import (
	"hash/maphash"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

type keyBytes interface{ ~string | ~[]byte }

func tagOf(h uint64) uint32 { return uint32(h>>50) & 0xff }

// probe returns the first position of h's probe run whose entry match
// accepts and the entry's index, or the empty position ending the run.
func (sh *shard) probe(h uint64, match func(e *entry) bool) (pos, idx uint32, ok bool) {
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
		if x := s&idxMask - 1; s>>idxBits == tag && match(sh.at(x)) {
			return i, x, true
		}
	}
}

// find looks up key under lim (hash h): table position and entry index,
// or the empty position ending the probe run.
func find[K keyBytes](sh *shard, lim uint16, key K, h uint64) (pos, idx uint32, ok bool) {
	return sh.probe(h, func(e *entry) bool {
		return e.lim == lim && e.keyLen == uint32(len(key)) && string(sh.key(e)) == string(key)
	})
}

// insert adds a new entry, evicting if full; false when none may be evicted.
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
		// Every slot held by an unreported deletion: drop them.
		sh.dropDead()
		x, _ = sh.alloc() // live < perShard < maxSlots: a slot is free now
	}
	// Another limit's entry may hold the key bytes already.
	_, y, shared := sh.probe(h, func(e *entry) bool {
		return e.keyLen == uint32(len(key)) && string(sh.key(e)) == string(key)
	})
	off := uint32(len(sh.arena))
	if shared {
		off = sh.at(y).keyOff
	} else {
		sh.arena = append(sh.arena, key...)
	}
	mask := uint32(len(sh.table) - 1)
	pos := uint32(h) & mask
	for sh.table[pos] != 0 {
		pos = (pos + 1) & mask
	}
	sh.table[pos] = tagOf(h)<<idxBits | (x + 1)
	e := sh.at(x)
	*e = entry{state: s, keyOff: off, keyLen: uint32(len(key)), seen: sh.tick(), lim: lim, flags: fLive}
	if dirty {
		sh.markDirty(x, e)
	}
	sh.live++
	m.count.Add(1)
	return true
}

// evict removes the least recently seen of evictSample unprotected
// entries from a random position; false when all were protected.
func (m *Memory) evict(sh *shard) bool {
	if sh.live == 0 {
		return true
	}
	var protect func(string, ratelimit.State) bool
	if p := m.protect.Load(); p != nil {
		protect = *p
	}
	var names []string
	now := sh.tick() // one more count moves every age alike
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

// remove takes entry x at pos out of the table (dead until takeDirty when
// tracking).
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

// canAppend reports whether n more key bytes fit the 32-bit arena.
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
		// The first chunk grows from 16 entries.
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

// release frees entry x (hash h), its key bytes garbage unless shared.
func (sh *shard) release(x uint32, h uint64) {
	e := sh.at(x)
	off, n := e.keyOff, e.keyLen
	if _, _, shared := sh.probe(h, func(o *entry) bool { return o.keyOff == off && o.keyLen == n }); !shared {
		sh.garbage += int(n)
	}
	*e = entry{keyOff: sh.free}
	sh.free = x + 1
}

// dropDead frees every dead entry unreported: those deletions never reach
// the state file, and the states may return after a restart.
func (sh *shard) dropDead() {
	for _, x := range sh.dirty {
		if e := sh.at(x); e.flags&fDead != 0 {
			sh.release(x, maphash.Bytes(sh.seed, sh.key(e)))
		}
	}
}

// unlink empties table position pos by backward-shift deletion.
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

// tableSize returns a power of two at most 3/8 full with n entries.
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

// compact copies the referenced key bytes to a new arena.
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

// registry interns limit names; lookups read an immutable map unlocked.
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

// name returns the name of id, using and refreshing the snapshot *names.
func (r *registry) name(id uint16, names *[]string) string {
	if int(id) >= len(*names) {
		*names = r.all()
	}
	return (*names)[id]
}

// all returns the interned names by id (never modified).
func (r *registry) all() []string {
	if p := r.names.Load(); p != nil {
		return *p
	}
	return nil
}
