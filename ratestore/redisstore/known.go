package redisstore

import (
	"hash/maphash"
	"strings"
	"sync"
)

// DefaultKnownRecords is the number of rate keys' records a Store
// remembers for its fast path when Options.KnownRecords is zero. A
// record of up to knownInline bytes (two limits with names of up to 18
// bytes each) is kept inline, without pointers for the garbage collector
// to follow, under a 64-bit hash of its rate key; a longer one is kept
// as a string beside it. 114,688 is 16 shards of 7,168 records, which
// fill a map of 8,192 slots of 80 bytes to Go's maximum load of 7/8:
// about 10.5 MiB in all.
const DefaultKnownRecords = 16 * 7168

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
// the script compares the whole record. When a shard is full it is
// rebuilt with an arbitrary three quarters of its records: a map keeps
// the slots of deleted entries, so deleting a few at a time let 131,072
// records take 45 MiB after 1,000,000 keys had gone through. Safe for
// concurrent use.
type knownRecords struct {
	seed   maphash.Seed
	max    int // entries per shard
	shards [knownShards]knownShard
}

// knownRecord is a record of up to knownInline bytes, without pointers.
type knownRecord struct {
	n uint8
	b [knownInline]byte
}

type knownShard struct {
	mu   sync.Mutex
	m    map[uint64]knownRecord
	long map[uint64]string // records longer than knownInline
}

// newKnownRecords returns a cache of about n records (n > 0).
func newKnownRecords(n int) *knownRecords {
	k := &knownRecords{seed: maphash.MakeSeed(), max: max(n/knownShards, 1)}
	for i := range k.shards {
		k.shards[i].m = make(map[uint64]knownRecord)
		k.shards[i].long = make(map[uint64]string)
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
	if r, ok := sh.m[h]; ok {
		return string(r.b[:r.n]), true
	}
	rec, ok := sh.long[h]
	return rec, ok
}

// set remembers rec as key's record (a copy); an empty rec forgets key.
func (k *knownRecords) set(key, rec string) {
	sh, h := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, inline := sh.m[h]
	_, long := sh.long[h]
	if rec == "" || (inline && len(rec) > knownInline) || (long && len(rec) <= knownInline) {
		delete(sh.m, h)
		delete(sh.long, h)
		inline, long = false, false
		if rec == "" {
			return
		}
	}
	if !inline && !long && len(sh.m)+len(sh.long) >= k.max {
		sh.rebuild(k.max)
	}
	if len(rec) > knownInline {
		// A copy: rec may be part of a script's whole answer.
		sh.long[h] = strings.Clone(rec)
		return
	}
	var r knownRecord
	r.n = uint8(copy(r.b[:], rec))
	sh.m[h] = r
}

// rebuild keeps three quarters of the shard's records (of at most max)
// in new maps (sh.mu held).
func (sh *knownShard) rebuild(max int) {
	keep := max * 3 / 4
	m := make(map[uint64]knownRecord, max)
	for h, r := range sh.m {
		if len(m) >= keep {
			break
		}
		m[h] = r
	}
	long := make(map[uint64]string)
	for h, rec := range sh.long {
		if len(m)+len(long) >= keep {
			break
		}
		long[h] = rec
	}
	sh.m, sh.long = m, long
}

// len returns the number of records remembered.
func (k *knownRecords) len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m) + len(sh.long)
		sh.mu.Unlock()
	}
	return n
}
