package redisstore

import (
	"hash/maphash"
	"sync"
)

// DefaultKnownRecords is the number of rate keys' records a Store
// remembers for its fast path when Options.KnownRecords is zero. Each
// costs the daemon about 0.4 KB of resident memory with the default
// two-limit stack (a 61-byte record, its Redis key, the map's share and
// the garbage collector's headroom: ratelimitd-bench's RSS grew from 82
// to 126 MiB for 100,000 senders), so at most about 55 MB.
const DefaultKnownRecords = 1 << 17

// knownShards spreads the remembered records over independently locked
// maps, so that concurrent decisions rarely wait for each other.
const knownShards = 16

// knownRecords remembers, per Redis key, the record this host last saw
// in Redis or last asked Redis to store (a speculation until the script
// confirms it): the fast path (fast.go) decides a request from them in
// Go, and the script only checks that each record is still the one
// remembered before storing the new one. A wrong entry (another host
// wrote the key, a `rate reset`, a merge, a failed call) costs one slow
// decision, never a wrong one: the script compares the whole record.
// When a shard is full, an arbitrary sixteenth of it is forgotten. Safe
// for concurrent use.
type knownRecords struct {
	seed   maphash.Seed
	max    int // entries per shard
	shards [knownShards]knownShard
}

type knownShard struct {
	mu sync.Mutex
	m  map[string]string
}

// newKnownRecords returns a cache of about n records (n > 0).
func newKnownRecords(n int) *knownRecords {
	k := &knownRecords{seed: maphash.MakeSeed(), max: max(n/knownShards, 1)}
	for i := range k.shards {
		k.shards[i].m = make(map[string]string)
	}
	return k
}

func (k *knownRecords) shard(key string) *knownShard {
	return &k.shards[maphash.String(k.seed, key)%knownShards]
}

// get returns the record remembered for key.
func (k *knownRecords) get(key string) (string, bool) {
	sh := k.shard(key)
	sh.mu.Lock()
	rec, ok := sh.m[key]
	sh.mu.Unlock()
	return rec, ok
}

// set remembers rec as key's record; an empty rec forgets key.
func (k *knownRecords) set(key, rec string) {
	sh := k.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec == "" {
		delete(sh.m, key)
		return
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= k.max {
		n := max(k.max/16, 1)
		for old := range sh.m {
			delete(sh.m, old)
			if n--; n == 0 {
				break
			}
		}
	}
	sh.m[key] = rec
}

// len returns the number of records remembered.
func (k *knownRecords) len() int {
	n := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
