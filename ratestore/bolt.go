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
	// Limits are the parameters of the configured limits, by name (Mode
	// is ignored). When set, each limit's parameters are stored with its
	// states (bucket ratemeta), and the stored parameters decide: a state
	// is negligible when ratelimit.Limit.Negligible says so under the
	// parameters it was written with, so states of a limit the
	// configuration no longer names are kept until they have decayed under
	// their own parameters (or, with no stored parameters, for Retention
	// after their Time); states of a limit whose algorithm, period or
	// half-life changed are converted (see Reconfigure); and keys at or
	// above ProtectFraction of their limit are never evicted
	// (Memory.SetProtect). Negligible is then not used.
	Limits map[string]ratelimit.Limit
	// Retention is how long states of a limit with unknown parameters are
	// kept after their Time when Limits is set; 0 means DefaultRetention.
	Retention time.Duration
	// Negligible reports whether the state of key under limit is, at now,
	// equivalent to no state, when Limits is nil. Such states are not
	// restored and are swept. nil means no state is negligible: nothing
	// is swept, which is only safe with a bound on keys (MaxKeys).
	Negligible func(limit string, s ratelimit.State, now time.Time) bool
	// ReadOnly restores without writing anything: nothing negligible or
	// malformed is deleted, no parameters or converted states are stored,
	// Update, Delete and Flush return ErrReadOnly and Close does not
	// flush. For a BoltDB file opened with bbolt.Options.ReadOnly (the
	// offline CLI's rate list and show).
	ReadOnly bool
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger receives flush failures and sweep counts; nil discards.
	Logger *slog.Logger
	// SkipLost restores what can be read of a file with unreadable
	// records, counting them (PersistStats.Lost, LostKeys) and Lost
	// lists them, instead of failing: for `ratelimitd state check`, in
	// read-only mode. Without it NewPersistent refuses such a file with
	// statedb.RecordsLost's error. Unreadable records are never deleted
	// here: the daemon sets them aside (statedb.SetAside) once the
	// operator accepts their loss.
	SkipLost bool
}

// PersistStats are counters of a Persistent since NewPersistent.
type PersistStats struct {
	// Restored is how many states NewPersistent loaded; Dropped how many
	// stored states it did not load and deleted instead (negligible,
	// malformed, or of a limit beyond MaxLimits). Malformed counts the
	// dropped states whose value was not a state (wrong length, NaN or
	// infinite rate). Unconfigured counts restored states of limits not
	// in PersistOptions.Limits (kept until they decay); Converted the
	// states converted to a limit's changed parameters, at restore and by
	// Reconfigure. NotConverted counts the states whose conversion was
	// refused (a NaN in the state, or a result that is not finite: a bug)
	// and that were kept as they were, each time logged at ERROR.
	Restored, Dropped, Malformed, Unconfigured, Converted, NotConverted int64
	// Flushes is how many flushes committed; Failures how many failed
	// (their changes are retried at the next flush).
	Flushes, Failures int64
	// CompactionFailures is how many compactions failed (retried after
	// the next flush).
	CompactionFailures int64
	// LastError is the error of the last failed flush or compaction, at
	// LastErrorAt; LastFlushAt is when the last flush succeeded (a flush
	// with nothing to write succeeds). Zero times mean never.
	LastError                string
	LastErrorAt, LastFlushAt time.Time
	// Compactions is how many compactions of the journal into the snapshot
	// completed; Journal is the bytes of records in the journal now.
	Compactions, Journal int64
	// Written and Deleted count keys put and deleted by flushes; Skipped
	// counts changes that cannot be stored in BoltDB (an empty key or limit
	// name, or a limit name starting with NUL) and stay in memory only.
	Written, Deleted, Skipped int64
	// Pending is how many changes wait for the next flush after a failed
	// one.
	Pending int
	// LastFlush is the duration of the last committed flush.
	LastFlush time.Duration
	// Lost is how many records NewPersistent could not read (with
	// SkipLost) or were set aside before it (NoteLost), and LostKeys the
	// keys they held as far as can be told.
	Lost, LostKeys int64
}

// Persistent is a Memory whose state is kept in BoltDB by write-behind:
// every change is made in memory, and a flush appends all states changed or
// deleted since the previous flush to the journal in one read-write
// transaction (fsync'd on commit unless the DB was opened with NoSync).
// Run flushes every FlushInterval and sweeps negligible states every
// SweepInterval; Close flushes a last time. When the journal has grown
// past about half the snapshot (at least 32 MiB), Run compacts it into the
// snapshot in the background, in pieces of at most 20,000 keys, while its
// flushes go on between the pieces (see compact).
//
// Crash bound: a crash (SIGKILL, power loss) loses at most the changes
// made since the last committed flush began collecting them: FlushInterval
// plus the duration of one flush (and of one compaction piece, which a
// flush may wait for). Every key's stored state is then one it really had,
// no older than that (TestPersistentCrashBound kills a writer with SIGKILL
// and checks this); a flush takes the changes shard by shard, so the file
// is not a snapshot of one instant across keys. BoltDB's copy-on-write
// commit keeps the file consistent whenever the process dies, and a
// compaction does not change the stored state, only where it is kept, so
// a crash during one loses nothing (TestPersistentCrashBound also kills a
// writer that compacts every few flushes). A failed flush (disk full)
// keeps its changes and the next flush retries them; a failed compaction
// is logged and retried after the next flush.
//
// Delete (an operator's rate reset) is made durable at once: it flushes
// before it returns. Evictions (MaxKeys) and sweeps are persisted as
// deletions by the next flush.
//
// Cost: a flush writes its record, about 20 bytes plus the key per
// change, so its cost follows the number of changes, not the number of
// snapshot pages they fall in (BenchmarkFlushRandom100k). A compaction
// rewrites each snapshot leaf page holding a journaled key (copy-on-write),
// nearly all of them under random keys, deduplicated and in key order (a
// radix sort on 8 bytes of each key held with the entry, which reads the
// keys only to confirm the duplicates, BenchmarkCollect); its memory is 16
// bytes per journal entry, as keys and states are read from the mapping,
// plus the pages of one piece. The file holds the snapshot,
// the journal, and the pages of the largest compaction piece twice.
// NewPersistent reads every page without writing them, and it, each flush,
// sweep and compaction piece madvise BoltDB's read-only mapping out of the
// process's resident memory (Linux; the pages stay in the page cache).
// BenchmarkPersist2M measures the restore time, resident memory and
// snapshot size per pair (figures in docs/performance.md).
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

	// params are the parameters of the states held, by limit name: those
	// of the configuration (Limits) and, for limits it does not name, the
	// stored ones. Replaced whole, never modified.
	params atomic.Pointer[map[string]ratelimit.Limit]
	// convs holds, by limit name, the last conversion of its states
	// (LastConversion). Replaced whole, never modified.
	convs atomic.Pointer[map[string]policy.Conversion]

	// cmu serialises compactions (which take mu only briefly); pieceKeys
	// is the number of keys of one compaction piece.
	cmu       sync.Mutex
	pieceKeys int

	// flushBytes and compactBytes are the heap the flushes keep between
	// them and the running compaction holds (Working).
	flushBytes, compactBytes atomic.Int64

	// Test hooks. beforeTake and afterFlush are called under mu: before a
	// flush takes the changes, and after it committed n records.
	// afterPiece is called after compaction piece i committed; when it
	// returns false the compaction stops there (as if the process died).
	beforeTake func()
	afterFlush func(n int)
	afterPiece func(i int) bool
	// yield lets the request goroutines waiting for this goroutine's CPU
	// run (runtime.Gosched; a test hook may count the calls): see
	// yieldEntries.
	yield func()
}

// A flush and a compaction run for milliseconds without blocking: taking
// some 100,000 changes (cache misses in the store's shards), encoding
// them, reading, sorting and applying a journal of 800,000 entries. With
// one CPU (GOMAXPROCS 1) the requests that arrive meanwhile would wait up
// to Go's 10 ms preemption, which made most of the p99.9 of a daemon
// pinned to one CPU. So they yield the CPU (Persistent.yield) between the
// store's shards when taking changes, and every yieldEntries entries or
// journal record when encoding, collecting and applying; the CPU time is
// the same, and with several CPUs a yield costs a fraction of a
// microsecond.
const yieldEntries = 4096

// NewPersistent restores the state stored in db into mem and returns a
// Persistent that keeps mem's changes in db. db is open and stays owned by
// the caller (Close does not close it); mem should be empty (states it
// already holds win over stored ones, and are written at the first flush).
// Restoring skips the states opts.Negligible reports negligible now, and
// appends their deletion to the journal before it returns; mem's MaxKeys
// bound applies, and a state evicted while restoring is deleted by the
// first flush. It returns an error wrapping ErrVersion for a bucket or a
// journal record written in an unknown format, one wrapping ErrDamaged when
// reading the file panicked (BoltDB panics on corrupt pages; the panic is
// recovered), or BoltDB's error. Start Run to flush periodically.
func NewPersistent(db *bbolt.DB, mem *Memory, opts PersistOptions) (p *Persistent, err error) {
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
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
		compactMin: compactMinBytes, compactPerPair: compactPairBytes, pieceKeys: compactPiece, yield: runtime.Gosched}
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
// the states held, and calls swap, which installs the configuration that
// uses them (policy.Engine.Reload), while every shard of the memory store
// is locked, so no request reads a state under parameters other than its
// own. States of a limit whose algorithm, period or half-life changed are
// converted so that a sender refused under the old parameters stays
// refused at least as long under the new ones, and a sender who was not
// refused is not refused for it (see convert); they and the new parameters
// are stored by the next flush, in one transaction. Limits no longer named
// keep their states and parameters. If swap fails nothing changes and its
// error is returned. It does nothing but call swap when
// PersistOptions.Limits was nil.
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

// noteConversions records, under mu, that the states of the limits in
// conv were converted from conv's old parameters at at, by cause
// (LastConversion).
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

// LastConversion returns the last conversion of the states of limit to
// changed parameters since NewPersistent (at restore, cause "restore", or
// by Reconfigure, "reload"), and whether there was one; it implements
// policy.Conversions. Safe for concurrent use.
func (p *Persistent) LastConversion(limit string) (policy.Conversion, bool) {
	if m := p.convs.Load(); m != nil {
		c, ok := (*m)[limit]
		return c, ok
	}
	return policy.Conversion{}, false
}

// setMeta records, under mu, that the parameters of limit are to be
// stored at the next flush.
func (p *Persistent) setMeta(limit string, l ratelimit.Limit) {
	if p.opts.ReadOnly || !persistableName(limit) {
		return
	}
	if p.metaDirty == nil {
		p.metaDirty = map[string]ratelimit.Limit{}
	}
	p.metaDirty[limit] = l
}

// Close flushes a last time and stops Run, and a compaction it runs (after
// its current transaction). Changes made after Close stay in memory only,
// and Flush returns ErrClosed. Close does not close the BoltDB file. It returns the last flush's error.
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
	// Wait for a compaction Run started: it stops after its current
	// transaction.
	p.cmu.Lock()
	p.cmu.Unlock() //lint:ignore SA2001 an empty critical section: waits for a running compaction
	return err
}

// Working returns the bytes of Go heap p holds beyond its Memory's
// footprint (Memory.Footprint), for a caller sizing the heap (the daemon's
// soft memory limit): the arrays a flush keeps for the next one (32 bytes
// per change taken, twice, plus the keys' bytes and the encoded records),
// which a flush with nothing to write gives up, and, while a compaction
// runs, its index of the journal (16 bytes per journal entry). Safe for
// concurrent use.
func (p *Persistent) Working() int64 {
	return p.flushBytes.Load() + p.compactBytes.Load()
}

// Stats returns the counters of p.
func (p *Persistent) Stats() PersistStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// NoteLost adds to the counts of lost records and keys (PersistStats.Lost,
// LostKeys) those the daemon set aside before restoring, when the
// operator accepted their loss (serve --accept-state-loss).
func (p *Persistent) NoteLost(records, keys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Lost += int64(records)
	p.stats.LostKeys += int64(keys)
}

// Lost returns the records NewPersistent could not read (with
// PersistOptions.SkipLost).
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

// Update is Memory.Update; the change is written by the next flush. It
// returns ErrReadOnly in read-only mode.
func (p *Persistent) Update(ctx context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	if p.opts.ReadOnly {
		return ErrReadOnly
	}
	return p.mem.Update(ctx, limit, key, fn)
}

// Delete forgets key under limit and, if it had state, flushes so that
// the reset survives a restart before Delete returns. If that flush fails
// the state is gone from memory, the deletion is retried by the next
// flush, and the error is returned.
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
