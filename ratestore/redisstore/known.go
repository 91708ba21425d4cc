package redisstore

import (
	"hash/maphash"
	"sync"
)

// DefaultKnownRecords is the number of rate keys' records a Store
// remembers for its fast path when Options.KnownRecords is zero. A
// record of up to knownInline bytes (two limits with names of up to 18
// bytes each) is kept inline, without pointers for the garbage collector
// to follow, under a 64-bit hash of its rate key: 131,072 of them took
// about 14 MiB of heap after 1,000,000 distinct keys had gone through the
// cache (with the deletions of a single map instead of generations, 45
// MiB). A longer one is kept as a string beside it.
const DefaultKnownRecords = 1 << 17

// knownShards spreads the remembered records over independently locked
// maps, so that concurrent decisions rarely wait for each other.
const knownShards = 16

// knownInline is the longest record kept inline (knownRecord).
const knownInline = 71

// knownRecords remembers, per Redis key, the record this host last saw
// in Redis or last asked Redis to store (a speculation until the script
// confirms it): the fast path (fast.go) decides a request from them in
// Go, and the script only checks that each record is still the one
// remembered before storing the new one. A wrong entry (another host
// wrote the key, a `rate reset`, a merge, a failed call, two keys whose
// hashes collide) costs one decision by the script, never a wrong one:
// the script compares the whole record. Each shard keeps two
// generations: records are added to the current one, and when it is
// full the previous one is dropped and the current one takes its place,
// so the records used recently stay (a record found in the previous
// generation moves to the current one) and memory stays bounded without
// the deleted slots that a map keeps after deletions. Safe for
// concurrent use.
type knownRecords struct {
	seed   maphash.Seed
	max    int // entries per generation of a shard
	shards [knownShards]knownShard
}

// knownRecord is a record of up to knownInline bytes, without pointers.
type knownRecord struct {
	n uint8
	b [knownInline]byte
}

// knownGen is one generation of a shard.
type knownGen struct {
	m    map[uint64]knownRecord
	long map[uint64]string // records longer than knownInline
}

func newKnownGen() knownGen {
	return knownGen{m: make(map[uint64]knownRecord), long: make(map[uint64]string)}
}

func (g *knownGen) get(h uint64) (string, bool) {
	if r, ok := g.m[h]; ok {
		return string(r.b[:r.n]), true
	}
	rec, ok := g.long[h]
	return rec, ok
}

func (g *knownGen) len() int { return len(g.m) + len(g.long) }

type knownShard struct {
	mu        sync.Mutex
	cur, prev knownGen
}

// newKnownRecords returns a cache of about n records (n > 0).
func newKnownRecords(n int) *knownRecords {
	k := &knownRecords{seed: maphash.MakeSeed(), max: max(n/knownShards/2, 1)}
	for i := range k.shards {
		k.shards[i].cur, k.shards[i].prev = newKnownGen(), newKnownGen()
	}
	return k
}

func (k *knownRecords) shard(key string) (*knownShard, uint64) {
	h := maphash.String(k.seed, key)
	return &k.shards[h%knownShards], h
}

// get returns the record remembered for key.
func (k *knownRecords) get(key string) (string, bool) {
	sh, h := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec, ok := sh.cur.get(h); ok {
		return rec, true
	}
	rec, ok := sh.prev.get(h)
	if ok {
		k.add(sh, h, rec)
	}
	return rec, ok
}

// set remembers rec as key's record; an empty rec forgets key.
func (k *knownRecords) set(key, rec string) {
	sh, h := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec == "" {
		for _, g := range []*knownGen{&sh.cur, &sh.prev} {
			delete(g.m, h)
			delete(g.long, h)
		}
		return
	}
	k.add(sh, h, rec)
}

// add puts rec in sh's current generation (sh.mu held).
func (k *knownRecords) add(sh *knownShard, h uint64, rec string) {
	if _, ok := sh.cur.get(h); !ok && sh.cur.len() >= k.max {
		sh.prev, sh.cur = sh.cur, newKnownGen()
	}
	if len(rec) > knownInline {
		delete(sh.cur.m, h)
		sh.cur.long[h] = rec
		return
	}
	delete(sh.cur.long, h)
	var r knownRecord
	r.n = uint8(copy(r.b[:], rec))
	sh.cur.m[h] = r
}

// len returns the number of records remembered (a record in both
// generations counts twice).
func (k *knownRecords) len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += sh.cur.len() + sh.prev.len()
		sh.mu.Unlock()
	}
	return n
}
