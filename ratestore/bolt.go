package ratestore

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// DefaultSweepInterval is the default of PersistOptions.SweepInterval.
const DefaultSweepInterval = time.Minute

// PersistOptions configures NewPersistent. The zero value is usable.
type PersistOptions struct {
	// SweepInterval is how often Tick drops negligible states (0:
	// DefaultSweepInterval).
	SweepInterval time.Duration
	// Limits are the configured limits' parameters by name (Mode
	// ignored). When set they are stored beside the states (ratemeta)
	// and the stored ones decide: a state is negligible under the
	// parameters it was written with (unknown ones: Retention after its
	// Time), states of a limit whose meaning changed are converted (see
	// Reconfigure), keys at or above ProtectFraction of their limit are
	// never evicted, and Negligible is not used.
	Limits map[string]ratelimit.Limit
	// Retention keeps states of limits with unknown parameters (0:
	// DefaultRetention).
	Retention time.Duration
	// Negligible, used when Limits is nil, reports whether a state is
	// equivalent to none: such states are not restored and are swept.
	// nil: nothing is swept (safe only with MaxKeys).
	Negligible func(limit string, s ratelimit.State, now time.Time) bool
	// ReadOnly restores without writing (for a file opened with
	// bbolt.Options.ReadOnly): Update, Delete and Flush return
	// ErrReadOnly, Close does not flush.
	ReadOnly bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger receives failures and sweep counts (nil: discard).
	Logger *slog.Logger
	// SkipLost restores what is readable of a file with unreadable
	// records, counting and listing them (Lost), for `ratelimitd state
	// check`; without it NewPersistent refuses such a file with
	// statedb.RecordsLost's error. Unreadable records are never deleted
	// here (the daemon sets them aside: statedb.SetAside).
	SkipLost bool
}

// PersistStats are a Persistent's counters since NewPersistent.
type PersistStats struct {
	// Restored: states loaded; Dropped: stored states deleted instead
	// (negligible, malformed, or beyond MaxLimits), of which Malformed
	// were not a state; Unconfigured: restored states of limits not in
	// Limits; Converted: states converted to changed parameters;
	// NotConverted: conversions refused (not finite), states kept.
	Restored, Dropped, Malformed, Unconfigured, Converted, NotConverted int64
	// Flushes committed and Failures failed (retried at the next flush).
	Flushes, Failures int64
	// CompactionFailures counts failed compactions (retried).
	CompactionFailures int64
	// LastError is the last failed flush's or compaction's error, at
	// LastErrorAt; LastFlushAt the last successful flush. Zero: never.
	LastError                string
	LastErrorAt, LastFlushAt time.Time
	// Compactions completed; Journal: bytes of records in the journal.
	Compactions, Journal int64
	// Written and Deleted: keys put and deleted by flushes; Skipped:
	// changes that cannot be stored (empty key or name, name starting
	// with NUL), kept in memory only.
	Written, Deleted, Skipped int64
	// Pending: changes waiting after a failed flush.
	Pending int
	// LastFlush is the duration of the last committed flush.
	LastFlush time.Duration
	// Lost: unreadable records (SkipLost, or NoteLost), LostKeys the keys
	// they held as far as can be told.
	Lost, LostKeys int64
}

// Persistent is a Memory kept in BoltDB by write-behind: changes are made
// in memory, and each flush appends every state changed or deleted since
// the last one to the journal in one transaction. Tick (called by
// statedb.Flusher every flush_interval) flushes, sweeps, and starts a
// compaction of the journal into the snapshot once the journal passes
// about half the snapshot (at least 32 MiB), in pieces of compactPiece
// keys between which flushes go on. Close flushes a last time.
//
// A crash loses at most the changes since the last committed flush began
// (one interval plus one flush and one compaction piece); every stored
// state is one the key really had (TestPersistentCrashBound). A failed
// flush keeps its changes for the next. Delete flushes before it returns.
// Evictions and sweeps are persisted as deletions by the next flush.
//
// Restore, flushes and compaction pieces madvise BoltDB's mapping out of
// resident memory (Linux).
//
// Its methods are safe for concurrent use. Create it with NewPersistent.
type Persistent struct {
	db   *bbolt.DB
	mem  *Memory
	opts PersistOptions
	log  *slog.Logger
	done chan struct{}

	mu      sync.Mutex // serialises flushes; guards the fields below
	closed  bool
	lost    []statedb.Lost // the records restore could not read
	pending batch
	// metaDirty holds the parameters to store at the next flush.
	metaDirty map[string]ratelimit.Limit
	rbuf      []byte // the records of a flush, encoded
	rends     []int  // where each record ends in rbuf
	journal   int64  // bytes of records in the journal
	stats     PersistStats
	convErr   error // the last refused conversion, for the log
	// The compaction threshold: max(compactMin, compactPerPair * states).
	compactMin, compactPerPair int64

	// params: the parameters of the states held, by limit (configured or
	// stored); convs: each limit's last conversion. Replaced whole.
	params atomic.Pointer[map[string]ratelimit.Limit]
	convs  atomic.Pointer[map[string]policy.Conversion]

	cmu        sync.Mutex // serialises compactions
	pieceKeys  int        // keys of one compaction piece
	compacting atomic.Bool
	lastSweep  time.Time // by Tick

	// Heap held between flushes and by a running compaction (Working).
	flushBytes, compactBytes atomic.Int64

	// Test hooks, called under mu: before a flush takes the changes and
	// after it committed n records; afterPiece after compaction piece i
	// (false stops the compaction there, as if the process died).
	beforeTake func()
	afterFlush func(n int)
	afterPiece func(i int) bool
	// yield gives the CPU to waiting requests (runtime.Gosched) between
	// shards and every yieldEntries entries of long flushes and
	// compactions, which would otherwise hold a single CPU for up to Go's
	// 10 ms preemption.
	yield func()
}

const yieldEntries = 4096

// NewPersistent restores the state stored in db into mem (which should be
// empty) and returns a Persistent that keeps mem's changes in db; db stays
// the caller's. Negligible states are not restored and their deletion is
// journaled; mem's MaxKeys applies. It returns an error wrapping
// ErrVersion for a file of another format, ErrDamaged when reading the
// file panicked (recovered), statedb.RecordsLost's for unreadable records
// (unless SkipLost), or BoltDB's error.
func NewPersistent(db *bbolt.DB, mem *Memory, opts PersistOptions) (p *Persistent, err error) {
	if opts.SweepInterval <= 0 {
		opts.SweepInterval = DefaultSweepInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Retention <= 0 {
		opts.Retention = DefaultRetention
	}
	p = &Persistent{db: db, mem: mem, opts: opts, log: opts.Logger, done: make(chan struct{}),
		compactMin: compactMinBytes, compactPerPair: compactPairBytes, pieceKeys: compactPiece, yield: runtime.Gosched,
		lastSweep: time.Now()}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	mem.startTracking()
	err = damageSafe(db, func() error {
		if err := p.restore(); err != nil {
			return err
		}
		p.release()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// negligible reports whether s, stored under limit, is equivalent to no
// state at now (see PersistOptions.Limits and Negligible).
func (p *Persistent) negligible(limit string, s ratelimit.State, now time.Time) bool {
	if p.opts.Limits == nil {
		return p.opts.Negligible != nil && p.opts.Negligible(limit, s, now)
	}
	if l, ok := (*p.params.Load())[limit]; ok {
		return l.Negligible(s, now)
	}
	return now.UnixNano()-s.Time > int64(p.opts.Retention)
}

// protected reports whether the rate of s, under its limit's parameters,
// is at or above ProtectFraction of the limit in force for it (for a
// baseline limit, the key's learned allowance) (Memory.SetProtect). States
// of limits with unknown parameters are not protected.
func (p *Persistent) protected(limit string, s ratelimit.State) bool {
	l, ok := (*p.params.Load())[limit]
	if !ok || s.IsZero() {
		return false
	}
	rate, allowed := l.Usage(s, p.opts.Now())
	return rate >= ProtectFraction*allowed
}

// Params returns the parameters of the states held under limit (the
// configured ones, or for a limit the configuration does not name, the
// stored ones), and whether they are known.
func (p *Persistent) Params(limit string) (ratelimit.Limit, bool) {
	if m := p.params.Load(); m != nil {
		l, ok := (*m)[limit]
		return l, ok
	}
	return ratelimit.Limit{}, false
}

// Reconfigure makes limits (as PersistOptions.Limits) the parameters of
// the states held and calls swap (policy.Engine.Reload) with every shard
// locked, so no request reads a state under other parameters. States of a
// limit whose algorithm, period or half-life changed are converted (a
// refused sender stays refused as long, an admitted one stays admitted)
// and stored, with the parameters, by the next flush. If swap fails
// nothing changes and its error is returned. Without Limits it only calls
// swap.
func (p *Persistent) Reconfigure(limits map[string]ratelimit.Limit, swap func() error) error {
	if p.opts.Limits == nil {
		return swap()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	old := *p.params.Load()
	next := maps.Clone(old)
	conv := map[string][2]ratelimit.Limit{}
	for name, l := range limits {
		l = meaning(l)
		if o, ok := old[name]; ok && !sameMeaning(o, l) {
			conv[name] = [2]ratelimit.Limit{o, l}
		}
		next[name] = l
	}
	var err error
	var notConv int64
	now := p.opts.Now()
	n := p.mem.withAllLocked(func() bool {
		if err = swap(); err != nil {
			return false
		}
		return true
	}, func(limit string, s ratelimit.State) (ratelimit.State, bool) {
		c, ok := conv[limit]
		if !ok {
			return s, false
		}
		cs, err := convert(s, c[0], c[1], now)
		if err != nil {
			notConv++
			p.convErr = err
			return s, false // kept as it was
		}
		return cs, true
	})
	if err != nil {
		return err
	}
	p.params.Store(&next)
	p.noteConversions(conv, now, "reload")
	for name, l := range limits {
		if o, ok := old[name]; !ok || o != meaning(l) {
			p.setMeta(name, meaning(l))
		}
	}
	p.stats.Converted += int64(n)
	if notConv > 0 {
		p.stats.NotConverted += notConv
		p.log.Error("rate states not converted to changed limit parameters and kept as they were (a bug: the conversion was not finite)",
			"count", notConv, "example", p.convErr)
	}
	if len(conv) > 0 {
		p.log.Warn("rate states converted to changed limit parameters", "limits", slices.Sorted(maps.Keys(conv)), "states", n)
	}
	return nil
}

// noteConversions records, under mu, the conversions conv at at, by
// cause (LastConversion).
func (p *Persistent) noteConversions(conv map[string][2]ratelimit.Limit, at time.Time, cause string) {
	if len(conv) == 0 {
		return
	}
	m := map[string]policy.Conversion{}
	if old := p.convs.Load(); old != nil {
		m = maps.Clone(*old)
	}
	for name, c := range conv {
		m[name] = policy.Conversion{From: c[0], At: at, Cause: cause}
	}
	p.convs.Store(&m)
}

// LastConversion returns the last conversion of limit's states since
// NewPersistent (cause "restore" or "reload"); it implements
// policy.Conversions.
func (p *Persistent) LastConversion(limit string) (policy.Conversion, bool) {
	if m := p.convs.Load(); m != nil {
		c, ok := (*m)[limit]
		return c, ok
	}
	return policy.Conversion{}, false
}

// setMeta has, under mu, the parameters of limit stored at the next
// flush.
func (p *Persistent) setMeta(limit string, l ratelimit.Limit) {
	if p.opts.ReadOnly || !persistableName(limit) {
		return
	}
	if p.metaDirty == nil {
		p.metaDirty = map[string]ratelimit.Limit{}
	}
	p.metaDirty[limit] = l
}

// Close flushes a last time and stops a running compaction (after its
// current transaction), returning the flush's error; later Flush calls
// return ErrClosed. It does not close the BoltDB file.
func (p *Persistent) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	var err error
	if !p.opts.ReadOnly {
		err = p.flushLocked()
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	// Wait for a running compaction.
	p.cmu.Lock()
	p.cmu.Unlock() //lint:ignore SA2001 an empty critical section: waits for a running compaction
	return err
}

// Working returns the Go heap p holds beyond Memory.Footprint, for the
// daemon's soft memory limit: the arrays a flush keeps for the next and a
// running compaction's index (16 bytes per journal entry).
func (p *Persistent) Working() int64 {
	return p.flushBytes.Load() + p.compactBytes.Load()
}

// Stats returns the counters of p.
func (p *Persistent) Stats() PersistStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// NoteLost adds the records and keys the daemon set aside before
// restoring (serve --accept-state-loss) to PersistStats.Lost, LostKeys.
func (p *Persistent) NoteLost(records, keys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Lost += int64(records)
	p.stats.LostKeys += int64(keys)
}

// Lost returns the records NewPersistent could not read (SkipLost).
func (p *Persistent) Lost() []statedb.Lost {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lost)
}

// Memory returns the in-memory store p persists.
func (p *Persistent) Memory() *Memory { return p.mem }

// Get returns the state of key under limit (from memory).
func (p *Persistent) Get(ctx context.Context, limit, key string) (ratelimit.State, error) {
	return p.mem.Get(ctx, limit, key)
}

// Update is Memory.Update; the next flush writes the change.
func (p *Persistent) Update(ctx context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	if p.opts.ReadOnly {
		return ErrReadOnly
	}
	return p.mem.Update(ctx, limit, key, fn)
}

// Delete forgets key under limit and, if it had state, flushes before it
// returns (an operator's reset survives a restart). If that flush fails,
// the next retries the deletion, and the error is returned.
func (p *Persistent) Delete(ctx context.Context, limit, key string) (bool, error) {
	if p.opts.ReadOnly {
		return false, ErrReadOnly
	}
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
