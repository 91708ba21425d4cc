package ratestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Recipients keeps a ratelimit.AddrSet of recent recipients per (limit,
// key) pair of the per = "addr" limits (policy.RecipientSets), at most
// MaxKeys pairs; a full shard drops a random pair. Flush writes changed
// pairs to bucket "rcptsets" under name NUL key, as statedb records of
// version 1: period (ns, 8 bytes little-endian) then AddrSet.MarshalBinary.
// Safe for concurrent use.
type Recipients struct {
	opts   RecipientOptions
	db     *bbolt.DB
	seed   maphash.Seed
	shards [recipientShards]rcptShard
	flushM sync.Mutex // serialises flushes
	closed atomic.Bool
	// lastSweep is when Tick last swept (one goroutine).
	lastSweep time.Time
}

const recipientShards = 32

// rcptBucket is the BoltDB bucket of the recipient sets.
var rcptBucket = []byte("rcptsets")

// rcptVersion is the record version of a recipient set.
const rcptVersion = 1

// openRcpt returns the checked payload of set v of pair k (statedb.ErrRecord).
func openRcpt(k, v []byte) ([]byte, error) {
	ver, payload, err := statedb.Unseal(k, v)
	if err == nil && (ver != rcptVersion || len(payload) < 8) {
		err = fmt.Errorf("%w: a value of version %d and %d bytes, not a recipient set", statedb.ErrRecord, ver, len(payload))
	}
	return payload, err
}

type rcptEntry struct {
	set    ratelimit.AddrSet
	period time.Duration
}

type rcptShard struct {
	mu    sync.Mutex
	m     map[string]*rcptEntry
	dirty map[string]struct{}
}

// RecipientOptions configures NewRecipients and OpenRecipients.
type RecipientOptions struct {
	// MaxKeys bounds the (limit, key) pairs kept; default 100,000.
	MaxKeys int
}

// NewRecipients returns an in-memory Recipients (no persistence).
func NewRecipients(opts RecipientOptions) *Recipients {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 100_000
	}
	r := &Recipients{opts: opts, seed: maphash.MakeSeed(), lastSweep: time.Now()}
	for i := range r.shards {
		r.shards[i].m = make(map[string]*rcptEntry)
		r.shards[i].dirty = make(map[string]struct{})
	}
	return r
}

// OpenRecipients restores a Recipients kept in db's bucket "rcptsets",
// dropping expired and undecodable sets. Errors: statedb.RecordsLost's,
// ErrDamaged, BoltDB's.
func OpenRecipients(db *bbolt.DB, now time.Time, opts RecipientOptions) (*Recipients, error) {
	r := NewRecipients(opts)
	r.db = db
	n := 0
	var lost []statedb.Lost
	restore := func(tx *bbolt.Tx) error {
		b := tx.Bucket(rcptBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			id := string(k)
			sh := r.shard(id)
			payload, err := openRcpt(k, v) // at least 8 bytes
			if err != nil {
				lost = append(lost, statedb.Lost{Path: []string{string(rcptBucket)}, Key: bytes.Clone(k), Bytes: len(v), Keys: 1, Err: err})
				return nil
			}
			e := rcptEntry{period: time.Duration(binary.LittleEndian.Uint64(payload))}
			if e.set.UnmarshalBinary(payload[8:]) != nil || n >= r.opts.MaxKeys || e.period <= 0 || e.set.Empty(now, e.period) {
				sh.dirty[id] = struct{}{} // deleted at the next flush
				return nil
			}
			sh.m[id] = &e
			n++
			return nil
		})
	}
	if err := damageSafe(db, func() error { return db.View(restore) }); err != nil {
		return nil, fmt.Errorf("ratestore: restore %s: %w", rcptBucket, err)
	}
	if len(lost) > 0 {
		return nil, statedb.RecordsLost(db.Path(), lost)
	}
	return r, nil
}

func pairID(limit, key string) string { return limit + "\x00" + key }

func (r *Recipients) shard(id string) *rcptShard {
	return &r.shards[maphash.String(r.seed, id)%recipientShards]
}

// Seen reports whether key sent to address hash h (ratelimit.HashAddr)
// under limit in the current or previous period; no error.
func (r *Recipients) Seen(_ context.Context, limit, key string, h uint64, now time.Time, period time.Duration) (bool, error) {
	id := pairID(limit, key)
	sh := r.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[id]
	if e == nil {
		return false, nil
	}
	return e.set.Seen(h, now, period), nil
}

// Add records that key sent to address hash h under limit; capacity sizes
// the filter. Error: ErrKeyTooLong.
func (r *Recipients) Add(_ context.Context, limit, key string, h uint64, now time.Time, period time.Duration, capacity int) error {
	if len(key) > MaxKeyLen {
		return ErrKeyTooLong
	}
	id := pairID(limit, key)
	sh := r.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[id]
	if e == nil {
		if len(sh.m) >= (r.opts.MaxKeys+recipientShards-1)/recipientShards {
			for victim := range sh.m { // a random pair: map order
				delete(sh.m, victim)
				sh.dirty[victim] = struct{}{}
				break
			}
		}
		e = &rcptEntry{}
		sh.m[id] = e
	}
	e.period = period
	e.set.Add(h, now, period, capacity)
	sh.dirty[id] = struct{}{}
	return nil
}

// Forget drops key's set under limit and reports whether there was one.
func (r *Recipients) Forget(_ context.Context, limit, key string) (bool, error) {
	id := pairID(limit, key)
	sh := r.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	_, ok := sh.m[id]
	if ok {
		delete(sh.m, id)
		sh.dirty[id] = struct{}{}
	}
	return ok, nil
}

// each calls fn with each shard locked in turn.
func (r *Recipients) each(fn func(sh *rcptShard)) {
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		fn(sh)
		sh.mu.Unlock()
	}
}

// Len returns the number of (limit, key) pairs held.
func (r *Recipients) Len() (n int) {
	r.each(func(sh *rcptShard) { n += len(sh.m) })
	return n
}

// Bytes returns the memory the sets hold for addresses, in bytes.
func (r *Recipients) Bytes() (n int) {
	r.each(func(sh *rcptShard) {
		for _, e := range sh.m {
			n += e.set.Bytes()
		}
	})
	return n
}

// Sweep drops the sets that remember nothing at now and returns how many.
func (r *Recipients) Sweep(now time.Time) (n int) {
	r.each(func(sh *rcptShard) {
		for id, e := range sh.m {
			if e.set.Empty(now, e.period) {
				delete(sh.m, id)
				sh.dirty[id] = struct{}{}
				n++
			}
		}
	})
	return n
}

// Flush writes the changed sets in one transaction (kept on failure);
// ErrClosed after Close.
func (r *Recipients) Flush() error {
	if r.closed.Load() {
		return ErrClosed
	}
	return r.flush()
}

func (r *Recipients) flush() error {
	if r.db == nil {
		return nil
	}
	r.flushM.Lock()
	defer r.flushM.Unlock()
	type change struct {
		id  string
		val []byte // nil: delete
	}
	var changes []change
	r.each(func(sh *rcptShard) {
		for id := range sh.dirty {
			c := change{id: id}
			if e := sh.m[id]; e != nil {
				b, _ := e.set.MarshalBinary()
				v := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+len(b)), uint64(e.period))
				c.val = statedb.Seal(make([]byte, 0, len(v)+len(b)+statedb.RecordOverhead), []byte(id), rcptVersion, append(v, b...))
			}
			changes = append(changes, c)
		}
		clear(sh.dirty)
	})
	if len(changes) == 0 {
		return nil
	}
	path := []string{string(rcptBucket)}
	write := func(tx *bbolt.Tx, t *statedb.Tally) error {
		b, err := tx.CreateBucketIfNotExists(rcptBucket)
		if err != nil {
			return err
		}
		for _, c := range changes {
			if c.val == nil {
				err = t.Delete(b, path, []byte(c.id))
			} else {
				err = t.Put(b, path, []byte(c.id), c.val)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := damageSafe(r.db, func() error { return statedb.Update(r.db, write) }); err != nil {
		for _, c := range changes {
			sh := r.shard(c.id)
			sh.mu.Lock()
			sh.dirty[c.id] = struct{}{}
			sh.mu.Unlock()
		}
		return fmt.Errorf("ratestore: flush %s: %w", rcptBucket, err)
	}
	return nil
}

// Tick sweeps every minute, then flushes (statedb.Flusher).
func (r *Recipients) Tick() error {
	if now := time.Now(); now.Sub(r.lastSweep) >= sweepInterval {
		r.lastSweep = now
		r.Sweep(now)
	}
	if err := r.Flush(); err != ErrClosed {
		return err
	}
	return nil
}

// Close flushes a last time; later Flush calls return ErrClosed.
func (r *Recipients) Close() error {
	err := r.flush()
	r.closed.Store(true)
	return err
}
