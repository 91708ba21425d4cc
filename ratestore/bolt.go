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

// PersistOptions configures NewPersistent. The zero value is usable.
type PersistOptions struct {
	// Limits are the configured limits by name. When set they are stored
	// beside the states, changed ones are converted (Reconfigure), keys
	// at or above ProtectFraction are never evicted, and negligible
	// states are not restored and are swept. nil: nothing is swept.
	Limits map[string]ratelimit.Limit
	// ReadOnly restores without writing: Update, Delete and Flush return
	// ErrReadOnly, Close does not flush.
	ReadOnly bool
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Logger receives failures and sweep counts (nil: discard).
	Logger *slog.Logger
	// SkipLost restores around unreadable records, counting them (Stats);
	// without it NewPersistent fails with statedb.RecordsLost's error.
	SkipLost bool
}

// PersistStats are a Persistent's counters since NewPersistent.
type PersistStats struct {
	// Restored states; Dropped instead (negligible, malformed, beyond
	// MaxLimits), Malformed of them; Unconfigured: not in Limits;
	// Converted to changed parameters, NotConverted (not finite, kept).
	Restored, Dropped, Malformed, Unconfigured, Converted, NotConverted int64
	// Flushes committed and Failures failed (retried at the next flush).
	Flushes, Failures int64
	// CompactionFailures counts failed compactions (retried).
	CompactionFailures int64
	// LastError is the last failed flush's or compaction's error.
	LastError                string
	LastErrorAt, LastFlushAt time.Time
	// Journal: bytes of records in the journal.
	Compactions, Journal int64
	// Skipped: changes that cannot be stored (empty key or name, name
	// starting with NUL), kept in memory only.
	Written, Deleted, Skipped int64
	// Pending: changes waiting after a failed flush.
	Pending int
	// LastFlush is the duration of the last committed flush.
	LastFlush time.Duration
	// Lost: unreadable records (SkipLost, NoteLost), LostKeys their keys.
	Lost, LostKeys int64
}

// Persistent is a Memory kept in BoltDB by write-behind: each flush
// appends the states changed or deleted since the last to the journal in
// one transaction; Tick flushes, sweeps and compacts the journal into the
// snapshot in pieces. A crash loses at most the changes since the last
// committed flush began. Safe for concurrent use; create with NewPersistent.
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
	stats     PersistStats
	convErr   error // the last refused conversion, for the log
	// Compaction threshold: max(compactMin, compactPerPair * states).
	compactMin, compactPerPair int64

	// params of the states held and convs, by limit. Replaced whole.
	params atomic.Pointer[map[string]ratelimit.Limit]
	convs  atomic.Pointer[map[string]policy.Conversion]

	cmu        sync.Mutex // serialises compactions
	pieceKeys  int        // keys of one compaction piece
	compacting atomic.Bool
	lastSweep  time.Time     // by Tick
	sweepEvery time.Duration // sweepInterval; tests shorten it

	// Heap held between flushes and by a running compaction (Working).
	flushBytes, compactBytes atomic.Int64

	// Test hooks, under mu; afterPiece false stops the compaction.
	beforeTake func()
	afterFlush func(n int)
	afterPiece func(i int) bool
	// yield (runtime.Gosched) runs between shards and every yieldEntries
	// entries of long flushes and compactions.
	yield func()
}

const yieldEntries = 4096

// NewPersistent restores db into mem (empty) and returns a Persistent
// keeping mem's changes in db (still the caller's). Errors wrap ErrVersion,
// ErrDamaged, statedb.RecordsLost's (unless SkipLost), or BoltDB's.
func NewPersistent(db *bbolt.DB, mem *Memory, opts PersistOptions) (*Persistent, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Persistent{db: db, mem: mem, opts: opts, log: opts.Logger, done: make(chan struct{}),
		compactMin: compactMinBytes, compactPerPair: compactPairBytes, pieceKeys: compactPiece, yield: runtime.Gosched,
		lastSweep: time.Now(), sweepEvery: sweepInterval}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	mem.startTracking()
	if err := damageSafe(db, p.restore); err != nil {
		return nil, err
	}
	p.release()
	return p, nil
}

// negligible reports whether s is equivalent to no state at now.
func (p *Persistent) negligible(limit string, s ratelimit.State, now time.Time) bool {
	if p.opts.Limits == nil {
		return false
	}
	if l, ok := (*p.params.Load())[limit]; ok {
		return l.Negligible(s, now)
	}
	return now.UnixNano()-s.Time > int64(retention)
}

// protected reports whether s's rate is at or above ProtectFraction of
// its limit (Memory.SetProtect); unknown limits: false.
func (p *Persistent) protected(limit string, s ratelimit.State) bool {
	l, ok := (*p.params.Load())[limit]
	if !ok || s.IsZero() {
		return false
	}
	rate, allowed := l.Usage(s, p.opts.Now())
	return rate >= ProtectFraction*allowed
}

// Params returns the parameters (configured, else stored) of the states
// held under limit, and whether they are known.
func (p *Persistent) Params(limit string) (ratelimit.Limit, bool) {
	l, ok := (*p.params.Load())[limit] // stored by restore
	return l, ok
}

// Reconfigure makes limits the parameters of the states held, converting
// states of changed limits, and calls swap with every shard locked. If
// swap fails nothing changes and its error is returned.
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
	now, notConv := p.opts.Now(), p.stats.NotConverted
	n := p.mem.withAllLocked(func() bool {
		err = swap()
		return err == nil
	}, func(limit string, s ratelimit.State) (ratelimit.State, bool) {
		if c, ok := conv[limit]; ok {
			return p.convert(c, s, now)
		}
		return s, false
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
	p.logNotConverted(p.stats.NotConverted - notConv)
	if len(conv) > 0 {
		p.log.Warn("rate states converted to changed limit parameters", "limits", slices.Sorted(maps.Keys(conv)), "states", n)
	}
	return nil
}

// convert returns s converted from parameters cv[0] to cv[1], or, if the
// conversion is not finite, s itself (false), counted in NotConverted and
// kept for logNotConverted; under mu.
func (p *Persistent) convert(cv [2]ratelimit.Limit, s ratelimit.State, now time.Time) (ratelimit.State, bool) {
	c, err := cv[1].Convert(s, cv[0], now)
	if err != nil {
		p.stats.NotConverted++
		p.convErr = err
		return s, false
	}
	return c, true
}

// logNotConverted logs n states convert kept as they were, if any.
func (p *Persistent) logNotConverted(n int64) {
	if n > 0 {
		p.log.Error("rate states not converted to changed limit parameters and kept as they were (a bug: the conversion was not finite)",
			"count", n, "example", p.convErr)
	}
}

// noteConversions records conv for LastConversion; under mu.
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

// LastConversion returns limit's last conversion (policy.Conversions).
func (p *Persistent) LastConversion(limit string) (policy.Conversion, bool) {
	if m := p.convs.Load(); m != nil {
		c, ok := (*m)[limit]
		return c, ok
	}
	return policy.Conversion{}, false
}

// setMeta queues limit's parameters for the next flush; under mu.
func (p *Persistent) setMeta(limit string, l ratelimit.Limit) {
	if p.opts.ReadOnly || !persistableName(limit) {
		return
	}
	if p.metaDirty == nil {
		p.metaDirty = map[string]ratelimit.Limit{}
	}
	p.metaDirty[limit] = l
}

// Close flushes a last time, stops compaction and returns the flush's
// error; later Flush calls return ErrClosed. db stays open.
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
	p.cmu.Lock()
	p.cmu.Unlock() //lint:ignore SA2001 an empty critical section: waits for a running compaction
	return err
}

// Working returns the heap bytes p holds beyond Memory.Footprint.
func (p *Persistent) Working() int64 {
	return p.flushBytes.Load() + p.compactBytes.Load()
}

// Stats returns the counters of p.
func (p *Persistent) Stats() PersistStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// NoteLost adds records and keys set aside before restoring to the stats.
func (p *Persistent) NoteLost(records, keys int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Lost += int64(records)
	p.stats.LostKeys += int64(keys)
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

// Delete forgets key under limit and, if it had state, flushes; a flush
// error is returned and the next flush retries.
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
