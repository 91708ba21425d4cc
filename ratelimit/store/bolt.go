package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Bucket layout. Rate state lives in one top-level bucket of the daemon's
// BoltDB file (which the quarantine package shares with its own
// "quarantine/..." buckets):
//
//	ratestate                 top-level bucket
//	  "\x00version" -> "1"    format version (limit names never start with NUL)
//	  <limit name>            one nested bucket per limit, named as in [[limit]]
//	    <key> -> 16 bytes     Time (Unix ns, int64) then Rate (IEEE 754
//	                          float64 bits), both big-endian
//
// Keys are the rate keys verbatim, so `bbolt keys DB ratestate hourly`
// lists an operator's senders. Buckets keep BoltDB's default FillPercent:
// new keys arrive in random order, and a higher one splits full pages into
// a full and a nearly empty one (measured: 0.9 doubles the file).
var (
	bucketName = []byte("ratestate")
	versionKey = []byte("\x00version")
)

const (
	formatVersion = "1"
	valueLen      = 16
	// restoreChunk is how many dropped keys restore collects before it
	// deletes them (a cursor must not delete while it iterates).
	restoreChunk = 4096
)

// Defaults of PersistOptions.
const (
	DefaultFlushInterval = time.Second
	DefaultSweepInterval = time.Minute
)

// PersistOptions configures NewPersistent. The zero value is usable.
type PersistOptions struct {
	// FlushInterval is how often Run writes the changed states to BoltDB;
	// 0 means DefaultFlushInterval. It bounds what a crash loses.
	FlushInterval time.Duration
	// SweepInterval is how often Run drops negligible states from memory
	// (and, at the next flush, from BoltDB); 0 means
	// DefaultSweepInterval.
	SweepInterval time.Duration
	// Negligible reports whether the state of key under limit is, at now,
	// equivalent to no state (policy.Engine.Negligible). Such states are
	// not restored and are swept. nil means no state is negligible: nothing
	// is swept, which is only safe with a bound on keys (MaxKeys).
	Negligible func(limit string, s ratelimit.State, now time.Time) bool
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger receives flush failures and sweep counts; nil discards.
	Logger *slog.Logger
}

// PersistStats are counters of a Persistent since NewPersistent.
type PersistStats struct {
	// Restored is how many states NewPersistent loaded; Dropped how many
	// stored states it deleted instead (negligible, malformed, or of a
	// limit beyond MaxLimits).
	Restored, Dropped int64
	// Flushes is how many flushes committed; Failures how many failed
	// (their changes are retried at the next flush).
	Flushes, Failures int64
	// Written and Deleted count keys put and deleted by flushes; Skipped
	// counts changes that cannot be stored in BoltDB (an empty key or limit
	// name, or a limit name starting with NUL) and stay in memory only.
	Written, Deleted, Skipped int64
	// Pending is how many changes wait for the next flush after a failed
	// one.
	Pending int
	// LastFlush is the duration of the last committed flush.
	LastFlush time.Duration
}

// Persistent is a Memory whose state is kept in BoltDB by write-behind:
// every change is made in memory, and a flush writes all states changed or
// deleted since the previous flush in one read-write transaction (fsync'd
// on commit unless the DB was opened with NoSync). Run flushes every
// FlushInterval and sweeps negligible states every SweepInterval; Close
// flushes a last time.
//
// Crash bound: a crash (SIGKILL, power loss) loses at most the changes
// made since the last committed flush began collecting them: FlushInterval
// plus the duration of one flush. Every key's stored state is then one it
// really had, no older than that (TestPersistentCrashBound kills a writer
// with SIGKILL and checks this); a flush takes the changes shard by shard,
// so the file is not a snapshot of one instant across keys. BoltDB's
// copy-on-write commit keeps the file consistent whenever the process
// dies. A failed flush (disk full) keeps its changes and the next flush
// retries them.
//
// Delete (an operator's rate reset) is made durable at once: it flushes
// before it returns. Evictions (MaxKeys) and sweeps are persisted as
// deletions by the next flush.
//
// Cost: a flush rewrites each BoltDB leaf page holding a changed key
// (copy-on-write), so its cost follows the number of changes, and a file
// grows to hold the pages of the largest flush twice. NewPersistent, which
// reads every page, and each sweep madvise BoltDB's read-only mapping out
// of the process's resident memory (Linux; the pages stay in the page
// cache). Measured with 1,000,000 users under two limits
// (BenchmarkPersist2M): restore in 1.2 s to 96 MiB RSS, of which 91 MiB Go
// heap; a file of 85 (small flushes) to 130 (flushes of 100,000 keys)
// bytes per pair.
//
// Persistent implements policy.Store; its methods are safe for concurrent
// use. Create it with NewPersistent.
type Persistent struct {
	db   *bbolt.DB
	mem  *Memory
	opts PersistOptions
	log  *slog.Logger
	done chan struct{}

	mu      sync.Mutex // serialises flushes; guards the fields below
	closed  bool
	pending batch
	vals    []byte
	stats   PersistStats

	// Test hooks, called under mu: before a flush takes the changes, and
	// after it committed n records.
	beforeTake func()
	afterFlush func(n int)
}

// NewPersistent restores the state stored in db into mem and returns a
// Persistent that keeps mem's changes in db. db is open and stays owned by
// the caller (Close does not close it); mem should be empty (states it
// already holds win over stored ones, and are written at the first flush).
// Restoring skips, and deletes from db, the states opts.Negligible reports
// negligible now; mem's MaxKeys bound applies, and a state evicted while
// restoring is deleted by the first flush. It returns an error wrapping
// ErrVersion for a bucket written in an unknown format, or BoltDB's error.
// Start Run to flush periodically.
func NewPersistent(db *bbolt.DB, mem *Memory, opts PersistOptions) (*Persistent, error) {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Persistent{db: db, mem: mem, opts: opts, log: opts.Logger, done: make(chan struct{})}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	mem.startTracking()
	if err := p.restore(); err != nil {
		return nil, err
	}
	p.release()
	return p, nil
}

func (p *Persistent) negligible(limit string, s ratelimit.State, now time.Time) bool {
	return p.opts.Negligible != nil && p.opts.Negligible(limit, s, now)
}

// restore loads every stored state into memory, in one read-write
// transaction that also deletes what is not loaded.
func (p *Persistent) restore() error {
	now := p.opts.Now()
	return p.db.Update(func(tx *bbolt.Tx) error {
		root, err := tx.CreateBucketIfNotExists(bucketName)
		if err != nil {
			return fmt.Errorf("store: create bucket %s: %w", bucketName, err)
		}
		switch v := root.Get(versionKey); {
		case v == nil:
			if err := root.Put(versionKey, []byte(formatVersion)); err != nil {
				return fmt.Errorf("store: write format version: %w", err)
			}
		case string(v) != formatVersion:
			return fmt.Errorf("%w: %q (want %s)", ErrVersion, v, formatVersion)
		}
		var names []string
		err = root.ForEachBucket(func(k []byte) error {
			names = append(names, string(k))
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := p.restoreLimit(root, name, now); err != nil {
				return err
			}
		}
		return nil
	})
}

func (p *Persistent) restoreLimit(root *bbolt.Bucket, name string, now time.Time) error {
	b := root.Bucket([]byte(name))
	lim, err := p.mem.limits.intern(name)
	if err != nil {
		p.log.Warn("rate state of limit dropped", "limit", name, "err", err)
		p.stats.Dropped += int64(b.Stats().KeyN)
		return root.DeleteBucket([]byte(name))
	}
	var drop [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; {
		s, ok := decodeState(v)
		if !ok || p.negligible(name, s, now) {
			drop = append(drop, bytes.Clone(k))
		} else if load(p.mem, lim, k, s, false) {
			p.stats.Restored++
		}
		if len(drop) < restoreChunk {
			k, v = c.Next()
			continue
		}
		for _, d := range drop {
			if err := b.Delete(d); err != nil {
				return fmt.Errorf("store: delete %s/%q: %w", name, d, err)
			}
		}
		p.stats.Dropped += int64(len(drop))
		k, v = c.Seek(drop[len(drop)-1]) // the key after the last deleted
		drop = drop[:0]
	}
	for _, d := range drop {
		if err := b.Delete(d); err != nil {
			return fmt.Errorf("store: delete %s/%q: %w", name, d, err)
		}
	}
	p.stats.Dropped += int64(len(drop))
	if k, _ := b.Cursor().First(); k == nil {
		return root.DeleteBucket([]byte(name))
	}
	return nil
}

// Run flushes every FlushInterval and sweeps every SweepInterval until ctx
// is done, then flushes a last time and returns that flush's error; it
// returns nil at once after Close. A failed periodic flush is logged and
// retried at the next one. Call Run once, in its own goroutine.
func (p *Persistent) Run(ctx context.Context) error {
	flush := time.NewTicker(p.opts.FlushInterval)
	defer flush.Stop()
	var sweepC <-chan time.Time
	if p.opts.Negligible != nil {
		sweep := time.NewTicker(p.opts.SweepInterval)
		defer sweep.Stop()
		sweepC = sweep.C
	}
	for {
		select {
		case <-ctx.Done():
			if err := p.Flush(); err != nil && !errors.Is(err, ErrClosed) {
				return err
			}
			return nil
		case <-p.done:
			return nil
		case <-flush.C:
			if err := p.Flush(); err != nil && !errors.Is(err, ErrClosed) {
				p.log.Error("rate state flush failed, will retry", "err", err)
			}
			p.release()
		case <-sweepC:
			if n := p.Sweep(); n > 0 {
				p.log.Debug("swept negligible rate states", "count", n)
			}
			p.release()
		}
	}
}

// release drops BoltDB's mapped pages from the process's resident memory
// (Linux): after the restore has read them all, and after each flush and
// sweep, so the file counts in RSS only with the pages read since.
func (p *Persistent) release() {
	if err := releaseMapped(p.db); err != nil {
		p.log.Debug("madvise of the BoltDB mapping failed", "err", err)
	}
}

// Sweep drops from memory the states Negligible reports negligible now and
// returns how many; the next flush deletes them from BoltDB. It does
// nothing when Negligible is nil.
func (p *Persistent) Sweep() int {
	if p.opts.Negligible == nil {
		return 0
	}
	now := p.opts.Now()
	return p.mem.Sweep(func(limit string, s ratelimit.State) bool {
		return p.opts.Negligible(limit, s, now)
	})
}

// Flush writes every state changed or deleted since the last flush to
// BoltDB in one transaction and returns when it is committed. On failure
// the changes are kept and written by the next flush. It returns
// ErrClosed after Close.
func (p *Persistent) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	return p.flushLocked()
}

func (p *Persistent) flushLocked() error {
	if p.beforeTake != nil {
		p.beforeTake()
	}
	p.mem.takeDirty(p.pending.add)
	if len(p.pending.recs) == 0 {
		return nil
	}
	p.pending.compact()
	start := time.Now()
	var written, deleted, skipped int64
	err := p.db.Update(func(tx *bbolt.Tx) error {
		var err error
		written, deleted, skipped, err = p.write(tx)
		return err
	})
	if err != nil {
		p.stats.Failures++
		p.stats.Pending = len(p.pending.recs)
		return fmt.Errorf("store: flush of %d rate states: %w", len(p.pending.recs), err)
	}
	n := len(p.pending.recs)
	p.stats.Flushes++
	p.stats.Written += written
	p.stats.Deleted += deleted
	p.stats.Skipped += skipped
	p.stats.Pending = 0
	p.stats.LastFlush = time.Since(start)
	p.pending.reset()
	if p.afterFlush != nil {
		p.afterFlush(n)
	}
	return nil
}

// write stores the pending batch, sorted and with one record per key.
func (p *Persistent) write(tx *bbolt.Tx) (written, deleted, skipped int64, err error) {
	root, err := tx.CreateBucketIfNotExists(bucketName)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("store: create bucket %s: %w", bucketName, err)
	}
	if root.Get(versionKey) == nil {
		if err := root.Put(versionKey, []byte(formatVersion)); err != nil {
			return 0, 0, 0, err
		}
	}
	var names []string
	recs := p.pending.recs
	if need := len(recs) * valueLen; cap(p.vals) < need {
		p.vals = make([]byte, need)
	}
	vals := p.vals[:len(recs)*valueLen] // Put keeps values until commit
	var b *bbolt.Bucket                 // the bucket of the current limit, once looked up
	looked := false
	for i, r := range recs {
		if i == 0 || r.lim != recs[i-1].lim {
			b, looked = nil, false
		}
		name := p.mem.limits.name(r.lim, &names)
		key := p.pending.key(r)
		if !persistable(name, key) {
			skipped++
			continue
		}
		if r.del {
			if !looked {
				b, looked = root.Bucket([]byte(name)), true
			}
			if b != nil {
				if err := b.Delete(key); err != nil {
					return 0, 0, 0, fmt.Errorf("store: delete %s/%q: %w", name, key, err)
				}
			}
			deleted++
			continue
		}
		if b == nil {
			if b, err = root.CreateBucketIfNotExists([]byte(name)); err != nil {
				return 0, 0, 0, fmt.Errorf("store: create bucket %s/%s: %w", bucketName, name, err)
			}
			looked = true
		}
		v := vals[i*valueLen : (i+1)*valueLen : (i+1)*valueLen]
		encodeState(v, r.state)
		if err := b.Put(key, v); err != nil {
			return 0, 0, 0, fmt.Errorf("store: put %s/%q: %w", name, key, err)
		}
		written++
	}
	return written, deleted, skipped, nil
}

// persistable reports whether a state of key under the limit name can be
// stored in the layout above.
func persistable(name string, key []byte) bool {
	return name != "" && name[0] != 0 && len(name) <= bbolt.MaxKeySize &&
		len(key) > 0 && len(key) <= bbolt.MaxKeySize
}

// Close flushes a last time and stops Run. Changes made after Close stay
// in memory only, and Flush returns ErrClosed. Close does not close the
// BoltDB file. It returns the last flush's error.
func (p *Persistent) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	err := p.flushLocked()
	p.closed = true
	close(p.done)
	return err
}

// Stats returns the counters of p.
func (p *Persistent) Stats() PersistStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Memory returns the in-memory store p persists.
func (p *Persistent) Memory() *Memory { return p.mem }

// Get returns the state of key under limit (from memory).
func (p *Persistent) Get(ctx context.Context, limit, key string) (ratelimit.State, error) {
	return p.mem.Get(ctx, limit, key)
}

// Update is Memory.Update; the change is written by the next flush.
func (p *Persistent) Update(ctx context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	return p.mem.Update(ctx, limit, key, fn)
}

// Delete forgets key under limit and, if it had state, flushes so that
// the reset survives a restart before Delete returns. If that flush fails
// the state is gone from memory, the deletion is retried by the next
// flush, and the error is returned.
func (p *Persistent) Delete(ctx context.Context, limit, key string) (bool, error) {
	ok, err := p.mem.Delete(ctx, limit, key)
	if err != nil || !ok {
		return ok, err
	}
	if err := p.Flush(); err != nil && !errors.Is(err, ErrClosed) {
		return true, err
	}
	return true, nil
}

// Range is Memory.Range.
func (p *Persistent) Range(ctx context.Context, fn func(limit, key string, s ratelimit.State) bool) error {
	return p.mem.Range(ctx, fn)
}

// encodeState writes s into v (valueLen bytes).
func encodeState(v []byte, s ratelimit.State) {
	binary.BigEndian.PutUint64(v[0:8], uint64(s.Time))
	binary.BigEndian.PutUint64(v[8:16], math.Float64bits(s.Rate))
}

// decodeState reads a stored value; ok is false for a malformed one.
func decodeState(v []byte) (ratelimit.State, bool) {
	if len(v) != valueLen {
		return ratelimit.State{}, false
	}
	s := ratelimit.State{
		Time: int64(binary.BigEndian.Uint64(v[0:8])),
		Rate: math.Float64frombits(binary.BigEndian.Uint64(v[8:16])),
	}
	return s, !math.IsNaN(s.Rate)
}

// rec is one change taken from memory.
type rec struct {
	state ratelimit.State
	off   uint32 // key bytes in batch.keys
	n     uint32
	lim   uint16
	del   bool
}

// batch is the changes of one flush (and of failed earlier ones).
type batch struct {
	recs []rec
	keys []byte
}

func (b *batch) add(lim uint16, key []byte, s ratelimit.State, del bool) {
	b.recs = append(b.recs, rec{state: s, off: uint32(len(b.keys)), n: uint32(len(key)), lim: lim, del: del})
	b.keys = append(b.keys, key...)
}

func (b *batch) key(r rec) []byte { return b.keys[r.off : r.off+r.n : r.off+r.n] }

// compact sorts the records by limit and key and keeps the last record of
// each key (records were added in the order the changes happened), then
// packs the key bytes.
func (b *batch) compact() {
	slices.SortStableFunc(b.recs, func(x, y rec) int {
		if x.lim != y.lim {
			return int(x.lim) - int(y.lim)
		}
		return bytes.Compare(b.key(x), b.key(y))
	})
	out := b.recs[:0]
	for i, r := range b.recs {
		if i+1 < len(b.recs) && b.recs[i+1].lim == r.lim && bytes.Equal(b.key(b.recs[i+1]), b.key(r)) {
			continue
		}
		out = append(out, r)
	}
	keys := make([]byte, 0, len(b.keys))
	for i := range out {
		k := b.key(out[i])
		out[i].off = uint32(len(keys))
		keys = append(keys, k...)
	}
	b.recs, b.keys = out, keys
}

func (b *batch) reset() {
	if cap(b.recs) > 1<<16 {
		b.recs, b.keys = nil, nil
		return
	}
	b.recs, b.keys = b.recs[:0], b.keys[:0]
}
