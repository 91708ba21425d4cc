package redisstore

import (
	"hash/maphash"
	"strings"
	"sync"
)

// DefaultKnownRecords is Options.KnownRecords' default: 16 shards of 7,168.
const DefaultKnownRecords = 16 * 7168

// knownShards is the number of independently locked maps.
const knownShards = 16

// knownInline is the longest record (bytes) not in knownShard.long.
const knownInline = 71

// knownRecords remembers, by 64-bit key hash, the record last seen or
// stored (a wrong one costs a script decision); safe for concurrent use.
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

// rebuild keeps three quarters of the shard's records (sh.mu held).
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
