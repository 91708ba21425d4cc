package ratestore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Bucket layout. Rate state lives in two top-level buckets of the daemon's
// BoltDB file (which the quarantine package shares with its own
// "quarantine/..." buckets): a snapshot, and a journal of the changes
// flushed since the snapshot was last compacted.
//
//	ratestate                 top-level bucket: the snapshot
//	  "\x00version" -> "2"    format version (limit names never start with NUL)
//	  <limit name>            one nested bucket per limit, named as in [[limit]]
//	    <key> -> 16 bytes     Time (Unix ns, int64) then Rate (IEEE 754
//	                          float64 bits), both big-endian
//	ratemeta                  top-level bucket: each limit's parameters
//	                          (see meta.go)
//	ratejournal               top-level bucket: the journal
//	  <seq> -> record         seq a big-endian uint64 (NextSequence); each
//	                          flush appends one record, or several of about
//	                          journalValueMax bytes
//
// A record is a format byte (1) then groups of entries, one group per limit
// (a limit may have several groups in a flush split into several records):
//
//	group = uvarint(len(name)) name count(uint32, big-endian) entry...
//	entry = uvarint(len(key)<<1 | deleted) key [16-byte state, unless deleted]
//
// The stored state is the snapshot with the journal's records applied in
// sequence order: an entry replaces the key's state, a deleted entry removes
// it. NewPersistent restores exactly that, reading both in one read-only
// transaction: it merges each limit's snapshot bucket (in key order) with
// the last journal entry of each key (sorted by key), and writes nothing
// proportional to the store. A compaction (see Persistent.compact) applies
// the journal to the snapshot piece by piece, then deletes the records it
// applied, so `bbolt keys DB ratestate hourly` lists an operator's senders
// as of the last compaction. Format 1, written before the journal, is a
// snapshot without journal: NewPersistent reads it and marks the file 2,
// which an older ratelimitd refuses (ErrVersion) rather than ignore the
// journal.
//
// Keys are the rate keys verbatim. Snapshot buckets keep BoltDB's default
// FillPercent: new keys arrive in random order, and a higher one splits
// full pages into a full and a nearly empty one (measured: 0.9 doubles the
// file).
var (
	bucketName  = []byte("ratestate")
	journalName = []byte("ratejournal")
	versionKey  = []byte("\x00version")
)

const (
	formatVersion = "2"
	formatV1      = "1" // snapshot only: read, and marked formatVersion
	recordFormat  = 1   // first byte of a journal record
	valueLen      = 16
	// releaseEvery is how many states restore merges between two releases
	// of BoltDB's mapping from resident memory (releaseMappedTx).
	releaseEvery = 1 << 18
	// journalValueMax is the size past which a flush starts a new journal
	// record: records are BoltDB overflow pages, which need a run of free
	// pages as long as the record.
	journalValueMax = 1 << 20
	// A flush compacts when the journal holds at least
	// max(compactMinBytes, compactPairBytes per state held) bytes of
	// records: about half the snapshot, whose pages take 85 to 130 bytes
	// per state (see Persistent). Each compaction rewrites the snapshot's
	// pages holding a journaled key, nearly all of them under random keys,
	// so it is paid for by at least half a snapshot of cheap appends.
	// Its cost per journal entry falls as the journal grows, the pages
	// being rewritten once per compaction (BenchmarkCompact, 100,000
	// users, on a shared 2-core machine: 460 to 590 ns per entry at
	// 16 MiB, 340 to 520 at 32 MiB, 250 to 310 at 64 MiB); 32 MiB (some
	// 800,000 entries) keeps the file, the memory of a compaction (see
	// Persistent) and the time to read the journal at restore small.
	compactMinBytes  = 32 << 20
	compactPairBytes = 48
	// compactPiece is how many keys one write transaction of a compaction
	// puts or deletes: a contiguous range of the sorted keys, so that it
	// touches only the snapshot's leaf pages of that range, which BoltDB
	// keeps in memory until commit.
	compactPiece = 20_000
	// compactDeleteMax is how many journal records one transaction of a
	// compaction deletes at most.
	compactDeleteMax = 1024
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
	// Reconfigure.
	Restored, Dropped, Malformed, Unconfigured, Converted int64
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
// Measured with 1,000,000 users under two limits (BenchmarkPersist2M):
// restore in 1.2 s to 96 MiB RSS, of which 91 MiB Go heap; a snapshot of
// 85 (small flushes) to 130 (flushes of 100,000 keys) bytes per pair.
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
	// metaDirty holds the parameters to store at the next flush.
	metaDirty map[string]ratelimit.Limit
	rbuf      []byte // the records of a flush, encoded
	rends     []int  // where each record ends in rbuf
	journal   int64  // bytes of records in the journal
	stats     PersistStats
	// The compaction threshold: max(compactMin, compactPerPair * states).
	compactMin, compactPerPair int64

	// params are the parameters of the states held, by limit name: those
	// of the configuration (Limits) and, for limits it does not name, the
	// stored ones. Replaced whole, never modified.
	params atomic.Pointer[map[string]ratelimit.Limit]

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
		return convert(s, c[0], c[1], now), true
	})
	if err != nil {
		return err
	}
	p.params.Store(&next)
	for name, l := range limits {
		if o, ok := old[name]; !ok || o != meaning(l) {
			p.setMeta(name, meaning(l))
		}
	}
	p.stats.Converted += int64(n)
	if len(conv) > 0 {
		p.log.Warn("rate states converted to changed limit parameters", "limits", slices.Sorted(maps.Keys(conv)), "states", n)
	}
	return nil
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

// restore checks the format version, reads the stored limit parameters,
// loads every stored state into memory in one read-only transaction
// (restoreTx), then deletes the buckets of limits beyond MaxLimits and
// appends the deletion of the states it dropped, the states it converted
// and the changed parameters to the journal (a flush). A failure of that
// flush is logged: its changes stay pending for the next flush. In
// read-only mode it writes nothing.
func (p *Persistent) restore() error {
	version := func(tx *bbolt.Tx) error {
		root := tx.Bucket(bucketName)
		if root == nil && p.opts.ReadOnly {
			return nil
		}
		if root == nil {
			var err error
			if root, err = tx.CreateBucket(bucketName); err != nil {
				return fmt.Errorf("store: create bucket %s: %w", bucketName, err)
			}
		}
		switch v := root.Get(versionKey); {
		case v == nil || string(v) == formatV1:
			if p.opts.ReadOnly {
				return nil
			}
			if err := root.Put(versionKey, []byte(formatVersion)); err != nil {
				return fmt.Errorf("store: write format version: %w", err)
			}
		case string(v) != formatVersion:
			return fmt.Errorf("%w: %q (want %s or %s)", ErrVersion, v, formatV1, formatVersion)
		}
		return nil
	}
	var err error
	if p.opts.ReadOnly {
		err = p.db.View(version)
	} else {
		err = p.db.Update(version)
	}
	if err != nil {
		return err
	}
	// The parameters the stored states were written with; where the
	// configuration changed a limit's meaning, states are converted as
	// they are loaded.
	stored := map[string]ratelimit.Limit{}
	if err := p.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(metaName)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if l, ok := decodeParams(v); ok {
				stored[string(k)] = l
			} else {
				p.log.Warn("malformed stored limit parameters ignored", "limit", string(k))
			}
			return nil
		})
	}); err != nil {
		return err
	}
	params := maps.Clone(stored)
	conv := map[string][2]ratelimit.Limit{}
	for name, l := range p.opts.Limits {
		l = meaning(l)
		if o, ok := stored[name]; !ok || o != l {
			p.setMeta(name, l)
			if ok && !sameMeaning(o, l) {
				conv[name] = [2]ratelimit.Limit{o, l}
				continue // judged under o while restoring
			}
		}
		params[name] = l
	}
	p.params.Store(&params)
	if p.opts.Limits != nil {
		// Before the states are loaded: a restore into a smaller
		// max_keys evicts no offender either.
		p.mem.SetProtect(p.protected)
	}
	var bad []string // limits beyond MaxLimits with a snapshot bucket
	if err := p.db.View(func(tx *bbolt.Tx) error {
		var err error
		bad, err = p.restoreTx(tx, conv)
		return err
	}); err != nil {
		return err
	}
	for name, c := range conv {
		params[name] = c[1]
	}
	if len(conv) > 0 {
		p.log.Warn("stored rate states converted to changed limit parameters",
			"limits", slices.Sorted(maps.Keys(conv)), "states", p.stats.Converted)
	}
	if p.stats.Malformed > 0 {
		p.log.Error("malformed rate states dropped at restore (not a state, or a NaN or infinite rate)",
			"count", p.stats.Malformed, "file", p.db.Path())
	}
	if p.opts.ReadOnly {
		return nil
	}
	if len(bad) > 0 {
		err := p.db.Update(func(tx *bbolt.Tx) error {
			root := tx.Bucket(bucketName)
			for _, name := range bad {
				if err := root.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
					return fmt.Errorf("store: delete bucket %s/%s: %w", bucketName, name, err)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(p.pending.recs) > 0 || len(p.metaDirty) > 0 {
		if err := p.flushLocked(); err != nil {
			p.log.Error("writing the rate state changes of the restore failed, will retry", "err", err)
		}
	}
	return nil
}

// restoreTx loads the stored states into memory: for each limit, it merges
// the snapshot bucket, in key order, with the journal's last entry of each
// key, sorted by key; a journal entry wins over the snapshot, and a
// deleted one removes the key. A state that is malformed or negligible is
// dropped: its deletion is added to the pending batch. States of a limit
// in conv are judged under conv's old parameters and converted to its new
// ones; the converted state is added to the pending batch. It returns the
// names of the snapshot buckets of limits mem cannot intern (beyond
// MaxLimits), whose states are dropped.
func (p *Persistent) restoreTx(tx *bbolt.Tx, conv map[string][2]ratelimit.Limit) (bad []string, err error) {
	var c compaction
	if err := p.collect(tx, &c); err != nil {
		return nil, err
	}
	p.journal = c.bytes
	p.stats.Journal = c.bytes
	releaseMappedTx(p.db, tx) // collect read every record
	root := tx.Bucket(bucketName)
	var names []string
	if root != nil {
		if err := root.ForEachBucket(func(k []byte) error {
			names = append(names, string(k))
			return nil
		}); err != nil {
			return nil, err
		}
	}
	inJournal := make(map[string]int, len(c.names))
	for i, name := range c.names {
		inJournal[name] = i
	}
	for _, name := range c.names {
		if root == nil || root.Bucket([]byte(name)) == nil {
			names = append(names, name)
		}
	}
	now := p.opts.Now()
	merged := 0
	for _, name := range names {
		var ents []jentry
		if i, ok := inJournal[name]; ok {
			ents = c.limitEntries(i)
		}
		var b *bbolt.Bucket
		if root != nil {
			b = root.Bucket([]byte(name))
		}
		cv, converting := conv[name]
		_, configured := p.opts.Limits[name]
		lim, err := p.mem.limits.intern(name)
		if err != nil {
			p.log.Warn("rate state of limit dropped", "limit", name, "err", err)
			if b != nil {
				p.stats.Dropped += int64(b.Stats().KeyN)
				bad = append(bad, name)
			}
			for _, e := range ents {
				if _, _, del := c.entry(e); !del {
					p.stats.Dropped++
				}
			}
			continue
		}
		restore := func(k, v []byte) {
			if merged++; merged%releaseEvery == 0 {
				releaseMappedTx(p.db, tx)
			}
			s, ok := decodeState(v)
			if !ok {
				p.stats.Malformed++
			}
			if converting && ok {
				// Judged under the parameters it was written with.
				if s = convert(s, cv[0], cv[1], now); !s.IsZero() {
					p.stats.Converted++
					if load(p.mem, lim, k, s, false) {
						p.stats.Restored++
						if !p.opts.ReadOnly {
							p.pending.add(lim, k, s, false)
						}
					}
					return
				}
			}
			if !ok || converting || p.negligible(name, s, now) {
				if !p.opts.ReadOnly {
					p.pending.add(lim, k, ratelimit.State{}, true)
				}
				p.stats.Dropped++
			} else if load(p.mem, lim, k, s, false) {
				p.stats.Restored++
				if !configured && p.opts.Limits != nil {
					p.stats.Unconfigured++
				}
			}
		}
		var cur *bbolt.Cursor
		var k, v []byte
		if b != nil {
			cur = b.Cursor()
			k, v = cur.First()
		}
		for i := 0; k != nil || i < len(ents); {
			var jk []byte
			if i < len(ents) {
				jk = c.key(ents[i])
			}
			if k != nil && (jk == nil || bytes.Compare(k, jk) < 0) {
				if v != nil { // not a nested bucket, which is not ours
					restore(k, v)
				}
				k, v = cur.Next()
				continue
			}
			if k != nil && bytes.Equal(k, jk) {
				k, v = cur.Next() // the journal wins
			}
			if _, v, del := c.entry(ents[i]); !del {
				restore(jk, v)
			}
			i++
		}
	}
	return bad, nil
}

// Run flushes every FlushInterval and sweeps every SweepInterval until ctx
// is done, then flushes a last time and returns that flush's error; it
// returns nil at once after Close. A failed periodic flush is logged and
// retried at the next one. After a flush, when the journal has grown past
// the threshold, Run starts a compaction in another goroutine and goes on
// flushing meanwhile; it stops that compaction (between two pieces) and
// waits for it before it returns. Call Run once, in its own goroutine.
func (p *Persistent) Run(ctx context.Context) error {
	flush := time.NewTicker(p.opts.FlushInterval)
	defer flush.Stop()
	var sweepC <-chan time.Time
	if p.sweeps() {
		sweep := time.NewTicker(p.opts.SweepInterval)
		defer sweep.Stop()
		sweepC = sweep.C
	}
	stop := make(chan struct{})
	var compacting chan struct{} // closed when the compaction returns
	defer func() {
		close(stop)
		if compacting != nil {
			<-compacting
		}
	}()
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
				p.log.Error("rate state flush failed, will retry", "err", err, "pending", p.Stats().Pending)
			}
			if compacting == nil && p.compactDue() {
				compacting = make(chan struct{})
				go func(done chan struct{}) {
					defer close(done)
					if err := p.compact(stop); err != nil && !errors.Is(err, errCompactionStopped) {
						p.mu.Lock()
						p.stats.CompactionFailures++
						p.stats.LastError, p.stats.LastErrorAt = err.Error(), p.opts.Now()
						p.mu.Unlock()
						p.log.Error("rate journal compaction failed, will retry", "err", err)
					}
				}(compacting)
			}
			p.release()
		case <-compacting: // nil, never ready, when none runs
			compacting = nil
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

// Sweep drops from memory the states that are negligible now (under the
// parameters they were written with, see PersistOptions.Limits) and
// returns how many; the next flush deletes them from BoltDB. It does
// nothing when neither Limits nor Negligible is set, or in read-only mode.
func (p *Persistent) Sweep() int {
	if !p.sweeps() {
		return 0
	}
	now := p.opts.Now()
	return p.mem.Sweep(func(limit string, s ratelimit.State) bool {
		return p.negligible(limit, s, now)
	})
}

func (p *Persistent) sweeps() bool {
	return !p.opts.ReadOnly && (p.opts.Limits != nil || p.opts.Negligible != nil)
}

// Flush writes every state changed or deleted since the last flush to
// BoltDB in one transaction and returns when it is committed. On failure
// the changes are kept and written by the next flush, and the failure is
// counted (PersistStats.Failures, LastError). It returns ErrClosed after
// Close and ErrReadOnly in read-only mode.
func (p *Persistent) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.opts.ReadOnly {
		return ErrReadOnly
	}
	return p.flushLocked()
}

func (p *Persistent) flushLocked() error {
	err := p.flushChanges()
	if err != nil {
		p.stats.Failures++
		p.stats.Pending = len(p.pending.recs)
		p.stats.LastError, p.stats.LastErrorAt = err.Error(), p.opts.Now()
		return err
	}
	p.stats.LastFlushAt = p.opts.Now()
	return nil
}

// damageSafe runs fn, which reads or writes db, turning a panic of BoltDB
// (on a damaged page), or a fault on its mapping, into an error wrapping
// ErrDamaged.
func damageSafe(db *bbolt.DB, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrDamaged, db.Path(), r)
		}
	}()
	return fn()
}

// update runs fn in a read-write transaction (damageSafe).
func (p *Persistent) update(fn func(*bbolt.Tx) error) error {
	return damageSafe(p.db, func() error { return p.db.Update(fn) })
}

// view is update's read-only counterpart.
func (p *Persistent) view(fn func(*bbolt.Tx) error) error {
	return damageSafe(p.db, func() error { return p.db.View(fn) })
}

func (p *Persistent) flushChanges() error {
	if p.beforeTake != nil {
		p.beforeTake()
	}
	retry := len(p.pending.recs) > 0 // the changes of a failed flush
	p.mem.takeDirty(p.pending.add, p.yield)
	if len(p.pending.recs) == 0 && len(p.metaDirty) == 0 {
		// Nothing changed for a flush interval: the arrays sized for
		// the last burst of changes go back to the garbage collector.
		p.pending.release()
		p.rbuf, p.rends = nil, nil
		p.flushBytes.Store(0)
		return nil
	}
	// The journal keeps the order of a key's changes, so records need only
	// be grouped by limit; failed flushes, whose changes pile up, keep one
	// per key.
	if retry {
		p.pending.compact()
	} else {
		p.pending.group()
	}
	start := time.Now()
	written, deleted, skipped := p.encode()
	var err error
	if len(p.rends) > 0 || len(p.metaDirty) > 0 {
		err = p.update(func(tx *bbolt.Tx) error {
			if err := p.putMeta(tx); err != nil {
				return err
			}
			return p.appendJournal(tx)
		})
	}
	if err != nil {
		return fmt.Errorf("store: flush of %d rate states: %w", len(p.pending.recs), err)
	}
	p.metaDirty = nil
	n := len(p.pending.recs)
	p.journal += int64(len(p.rbuf))
	p.stats.Flushes++
	p.stats.Written += written
	p.stats.Deleted += deleted
	p.stats.Skipped += skipped
	p.stats.Pending = 0
	p.stats.Journal = p.journal
	p.stats.LastFlush = time.Since(start)
	p.pending.reset()
	if cap(p.rbuf) > 4*journalValueMax {
		p.rbuf = nil
	}
	p.flushBytes.Store(p.pending.bytes() + int64(cap(p.rbuf)) + int64(cap(p.rends))*int64(unsafe.Sizeof(0)))
	if p.afterFlush != nil {
		p.afterFlush(n)
	}
	return nil
}

// encode writes the pending batch (grouped by limit) as journal
// records into p.rbuf, the end of each in p.rends, and counts its changes.
func (p *Persistent) encode() (written, deleted, skipped int64) {
	buf, ends := p.rbuf[:0], p.rends[:0]
	var names []string
	recs := p.pending.recs
	start := 0 // of the current record in buf
	for i := 0; i < len(recs); {
		j := i + 1
		for j < len(recs) && recs[j].lim == recs[i].lim {
			j++
		}
		name := p.mem.limits.name(recs[i].lim, &names)
		if !persistableName(name) {
			skipped += int64(j - i)
			i = j
			continue
		}
		group, count := -1, 0 // where the open group's count goes
		for n, r := range recs[i:j] {
			if n%yieldEntries == yieldEntries-1 {
				p.yield()
			}
			key := p.pending.key(r)
			if !persistableKey(key) {
				skipped++
				continue
			}
			if group >= 0 && len(buf)-start >= journalValueMax {
				binary.BigEndian.PutUint32(buf[group:], uint32(count))
				group = -1
				ends = append(ends, len(buf))
				start = len(buf)
			}
			if len(buf) == start {
				buf = append(buf, recordFormat)
			}
			if group < 0 {
				buf = binary.AppendUvarint(buf, uint64(len(name)))
				buf = append(buf, name...)
				group, count = len(buf), 0
				buf = append(buf, 0, 0, 0, 0)
			}
			h := uint64(len(key)) << 1
			if r.del {
				h |= 1
			}
			buf = binary.AppendUvarint(buf, h)
			buf = append(buf, key...)
			if r.del {
				deleted++
			} else {
				buf = binary.BigEndian.AppendUint64(buf, uint64(r.state.Time))
				buf = binary.BigEndian.AppendUint64(buf, math.Float64bits(r.state.Rate))
				written++
			}
			count++
		}
		if group >= 0 {
			binary.BigEndian.PutUint32(buf[group:], uint32(count))
		}
		i = j
	}
	if len(buf) > start {
		ends = append(ends, len(buf))
	}
	p.rbuf, p.rends = buf, ends
	return written, deleted, skipped
}

// putMeta stores the parameters in p.metaDirty.
func (p *Persistent) putMeta(tx *bbolt.Tx) error {
	if len(p.metaDirty) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(metaName)
	if err != nil {
		return fmt.Errorf("store: create bucket %s: %w", metaName, err)
	}
	for name, l := range p.metaDirty {
		if err := b.Put([]byte(name), encodeParams(l)); err != nil {
			return fmt.Errorf("store: put %s/%s: %w", metaName, name, err)
		}
	}
	return nil
}

// appendJournal puts the records encoded in p.rbuf (which BoltDB keeps
// until commit) at the end of the journal.
func (p *Persistent) appendJournal(tx *bbolt.Tx) error {
	j, err := tx.CreateBucketIfNotExists(journalName)
	if err != nil {
		return fmt.Errorf("store: create bucket %s: %w", journalName, err)
	}
	prev := 0
	for _, end := range p.rends {
		seq, err := j.NextSequence()
		if err != nil {
			return err
		}
		if err := j.Put(binary.BigEndian.AppendUint64(nil, seq), p.rbuf[prev:end]); err != nil {
			return fmt.Errorf("store: append to %s: %w", journalName, err)
		}
		prev = end
	}
	return nil
}

// compactDue reports whether the journal has grown past the compaction
// threshold.
func (p *Persistent) compactDue() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.journal > 0 && p.journal >= max(p.compactMin, p.compactPerPair*int64(p.mem.Len()))
}

// errCompactionStopped is returned by compact when it was stopped between
// two pieces.
var errCompactionStopped = errors.New("store: rate journal compaction stopped")

// compact applies the journal to the snapshot and deletes the records it
// applied, in several small transactions:
//
//  1. In a read-only transaction, it reads every record of the journal (up
//     to the last one, of sequence S), keeps the last entry of each
//     (limit, key) and sorts them by limit and key (collect).
//  2. It puts or deletes these entries in the snapshot, pieceKeys
//     (20,000) at a time in key order, one write transaction per piece, so
//     that each touches only the snapshot's leaf pages of one key range
//     and BoltDB keeps little in memory until its commit. A piece reads
//     the keys and states from the records (BoltDB's mapping), which it
//     looks up again, as a mapping may move between transactions.
//  3. It deletes the records it read, sequences up to S, oldest first, in
//     one transaction (or a few, past compactDeleteMax records).
//
// Flushes run between these transactions and append records of sequence
// above S, which compact never touches. The stored state (the snapshot
// with the whole journal replayed) stays the same throughout, so a crash
// at any moment leaves it restorable and correct: journal records hold
// absolute states, not differences, so replaying the journal over a
// snapshot that already holds some pieces, whose states are those of the
// last entry up to S of their keys, gives each key the state of its last
// entry in the journal, or its snapshot state if it has none; and deleting
// the oldest records, whose last entries are all in the snapshot, leaves
// the journal's last entry of every key it still has unchanged. A crash
// between pieces leaves the journal whole; the next compaction does the
// work again.
//
// compact stops between two transactions, returning
// errCompactionStopped, when stop is closed or (if stop is not nil) after
// Close. Entries of a limit mem does not know (beyond MaxLimits at
// restore) are dropped. A malformed record is logged and dropped; one of
// an unknown format fails with ErrVersion.
func (p *Persistent) compact(stop <-chan struct{}) error {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	stopped := func() bool {
		if stop == nil {
			return false
		}
		select {
		case <-stop:
			return true
		case <-p.done:
			return true
		default:
			return false
		}
	}
	if stopped() {
		return errCompactionStopped
	}
	start := time.Now()
	c := compaction{yield: p.yield}
	if err := p.view(func(tx *bbolt.Tx) error { return p.collect(tx, &c) }); err != nil {
		return fmt.Errorf("store: compaction of %s: %w", journalName, err)
	}
	c.recs = nil // the mapping of that transaction
	if len(c.seqs) == 0 {
		return nil
	}
	p.compactBytes.Store(int64(cap(c.ents)) * int64(unsafe.Sizeof(jentry{})))
	defer p.compactBytes.Store(0)
	skip := make([]bool, len(c.names))
	for i, name := range c.names {
		_, ok := p.mem.limits.lookup(name)
		skip[i] = !ok
	}
	c.recs = make([][]byte, len(c.seqs))
	pieces := 0
	for i := 0; i < len(c.ents); i += p.pieceKeys {
		if stopped() {
			return errCompactionStopped
		}
		end := min(i+p.pieceKeys, len(c.ents))
		if err := p.update(func(tx *bbolt.Tx) error { return c.apply(tx, i, end, skip) }); err != nil {
			return fmt.Errorf("store: compaction of %s: %w", journalName, err)
		}
		p.release()
		if p.afterPiece != nil && !p.afterPiece(pieces) {
			return errCompactionStopped
		}
		pieces++
	}
	for i := 0; i < len(c.seqs); i += compactDeleteMax {
		if stopped() {
			return errCompactionStopped
		}
		seqs := c.seqs[i:min(i+compactDeleteMax, len(c.seqs))]
		err := p.update(func(tx *bbolt.Tx) error {
			j := tx.Bucket(journalName)
			for _, seq := range seqs {
				if err := j.Delete(seq); err != nil {
					return fmt.Errorf("store: delete %s/%x: %w", journalName, seq, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("store: compaction of %s: %w", journalName, err)
		}
		var n int64
		for _, size := range c.sizes[i : i+len(seqs)] {
			n += int64(size)
		}
		p.mu.Lock()
		p.journal -= n
		p.stats.Journal = p.journal
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.stats.Compactions++
	p.mu.Unlock()
	p.log.Debug("compacted rate journal", "entries", len(c.ents), "records", len(c.seqs),
		"pieces", pieces, "duration", time.Since(start))
	return nil
}

// compaction is the journal read by collect.
type compaction struct {
	seqs  [][]byte // the records' keys (sequences), in order
	sizes []int    // and their lengths
	recs  [][]byte // the records, valid during a transaction
	bytes int64    // the sum of sizes
	names []string // limit names, indexed by limit index
	// The last entry of each (limit, key), sorted by limit index and key:
	// those of limit i are ents[ends[i-1]:ends[i]] (limitEntries).
	ents []jentry
	ends []int
	// yield is Persistent.yield, called by apply every yieldEntries
	// entries.
	yield func()
}

// jentry is a journal entry, 16 bytes: the entry at offset off of record
// rec (its header, see entry). pre is the 8 bytes of its key after the
// prefix all the journal's keys of its limit share (zero-padded,
// big-endian), so that sorting by key need not read the keys, which lie at
// random places of BoltDB's mapping. Its limit is where it is in
// compaction.ents.
type jentry struct {
	pre      uint64
	rec, off uint32
}

// entry returns the key of e, its state (valueLen bytes) unless the entry
// is a deletion, and whether it is. collect checked the entry.
func (c *compaction) entry(e jentry) (key, state []byte, del bool) {
	v := c.recs[e.rec][e.off:]
	h, w := binary.Uvarint(v)
	n := w + int(h>>1)
	if h&1 == 1 {
		return v[w:n:n], nil, true
	}
	return v[w:n:n], v[n : n+valueLen : n+valueLen], false
}

func (c *compaction) key(e jentry) []byte {
	k, _, _ := c.entry(e)
	return k
}

// limitEntries returns the entries of limit index i.
func (c *compaction) limitEntries(i int) []jentry {
	start := 0
	if i > 0 {
		start = c.ends[i-1]
	}
	return c.ents[start:c.ends[i]]
}

// comparePre orders entries by pre, then in journal order (record, then
// offset in it). pre orders keys as their bytes do, up to ties: for keys
// sharing their first lcp bytes, the order of key[lcp:lcp+8] padded with
// zeros is that of the keys wherever it is strict (a key that is a proper
// prefix of another pads with zeros, which no byte is below). So entries
// in this order are in key order but for runs of equal pre, which are
// mostly the entries of one key (see dedup).
func comparePre(x, y jentry) int {
	switch {
	case x.pre != y.pre:
		return cmp.Compare(x.pre, y.pre)
	case x.rec != y.rec:
		return cmp.Compare(x.rec, y.rec)
	}
	return cmp.Compare(x.off, y.off)
}

// dedup appends to out the last entry of each key of run, entries of
// equal pre in journal order, in key order. It reads each key once when
// they are all the same (a key changed in several flushes), and sorts run
// by key otherwise.
func (c *compaction) dedup(out, run []jentry) []jentry {
	last := run[len(run)-1]
	if len(run) == 1 {
		return append(out, last)
	}
	k, same := c.key(last), true
	for _, e := range run[:len(run)-1] {
		if same = bytes.Equal(c.key(e), k); !same {
			break
		}
	}
	if same {
		return append(out, last)
	}
	slices.SortStableFunc(run, func(x, y jentry) int { return bytes.Compare(c.key(x), c.key(y)) })
	for i, e := range run {
		if i+1 < len(run) && bytes.Equal(c.key(run[i+1]), c.key(e)) {
			continue // a later entry of the same key wins
		}
		out = append(out, e)
	}
	return out
}

// radixMin is the number of entries below which sortEntries sorts by
// insertion.
const radixMin = 32

// sortEntries sorts ents, whose pre agree in their first shift bytes, by
// comparePre, in place: a most-significant-digit radix sort (American
// flag sort) on the bytes of pre, and an insertion sort of small ranges.
// It reads no key. (slices.SortFunc takes several times as long: its
// comparisons are calls.) yield is called before each bucket of at least
// yieldEntries entries is sorted.
func sortEntries(ents []jentry, shift int, yield func()) {
	for len(ents) > radixMin && shift < 8 {
		sh := 56 - 8*shift
		var count [256]int
		lo, hi := 255, 0 // the digits present
		for _, e := range ents {
			d := int(byte(e.pre >> sh))
			count[d]++
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo == hi {
			shift++ // one bucket: the next byte
			continue
		}
		// Permute in place: bucket d is ents[start[d]:start[d]+count[d]];
		// next[d] is where its next entry goes.
		var start, next [256]int
		n := 0
		for d := lo; d <= hi; d++ {
			start[d], next[d] = n, n
			n += count[d]
		}
		for d := lo; d <= hi; d++ {
			end := start[d] + count[d]
			for next[d] < end {
				e := ents[next[d]]
				for t := int(byte(e.pre >> sh)); t != d; t = int(byte(e.pre >> sh)) {
					e, ents[next[t]] = ents[next[t]], e
					next[t]++
				}
				ents[next[d]] = e
				next[d]++
			}
		}
		for d := lo; d <= hi; d++ {
			if count[d] >= yieldEntries {
				yield()
			}
			if count[d] > 1 {
				sortEntries(ents[start[d]:start[d]+count[d]], shift+1, yield)
			}
		}
		return
	}
	if len(ents) > radixMin { // all of equal pre
		slices.SortFunc(ents, comparePre)
		return
	}
	for i := 1; i < len(ents); i++ {
		e, j := ents[i], i
		for ; j > 0 && entryLess(e, ents[j-1]); j-- {
			ents[j] = ents[j-1]
		}
		ents[j] = e
	}
}

// entryLess reports whether comparePre(x, y) < 0.
func entryLess(x, y jentry) bool {
	if x.pre != y.pre {
		return x.pre < y.pre
	}
	if x.rec != y.rec {
		return x.rec < y.rec
	}
	return x.off < y.off
}

// keyPrefix returns the first 8 bytes of k as a big-endian integer, padded
// with zeros.
func keyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// collect reads every record of the journal in tx into c, and sorts and
// deduplicates its entries. c.recs are slices of BoltDB's mapping, valid
// until tx ends. A malformed record is logged, and its entries dropped;
// it counts in c.seqs (and is deleted by a compaction). A record of an
// unknown format fails with ErrVersion.
//
// It decodes the records twice, in journal order (sequential reads of the
// mapping): first to count each limit's entries and find the prefix all
// its keys share, then to place each entry, with its key's pre, in its
// limit's part of c.ents, which it sorts (sortEntries) and deduplicates
// (dedup). Its memory is c.ents, 16 bytes per journal entry.
func (p *Persistent) collect(tx *bbolt.Tx, c *compaction) error {
	j := tx.Bucket(journalName)
	if j == nil {
		return nil
	}
	type limit struct {
		n     int    // entries
		first []byte // key of the first entry
		lcp   int    // length of the prefix all keys share
	}
	var lims []limit
	ids := map[string]uint16{}
	var last []byte // the name of lastLim: records hold groups of one limit
	lastLim := uint16(0)
	lookup := func(name []byte) (uint16, error) {
		if last != nil && bytes.Equal(name, last) {
			return lastLim, nil
		}
		lim, ok := ids[string(name)]
		if !ok {
			if len(c.names) > math.MaxUint16 {
				return 0, errMalformedRecord
			}
			lim = uint16(len(c.names))
			ids[string(name)] = lim
			c.names = append(c.names, string(name))
			lims = append(lims, limit{})
		}
		last, lastLim = name, lim
		return lim, nil
	}
	var bad map[int]bool // malformed records
	cur := j.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if v == nil {
			continue // a bucket: not written by this package
		}
		p.yield()
		err := decodeRecord(v, func(name []byte, _, off, n int, _ bool) error {
			lim, err := lookup(name)
			if err != nil {
				return err
			}
			l, key := &lims[lim], v[off:off+n]
			if l.n == 0 {
				l.first, l.lcp = key, n
			} else {
				l.lcp = commonPrefix(l.first[:l.lcp], key)
			}
			l.n++
			return nil
		})
		if errors.Is(err, ErrVersion) {
			return err
		}
		if err != nil {
			p.log.Warn("malformed rate journal record dropped", "key", fmt.Sprintf("%x", k), "err", err)
			if bad == nil {
				bad = map[int]bool{}
			}
			bad[len(c.recs)] = true
		}
		c.seqs = append(c.seqs, bytes.Clone(k))
		c.sizes = append(c.sizes, len(v))
		c.recs = append(c.recs, v)
		c.bytes += int64(len(v))
	}
	// Each limit's entries go to ents[start[lim]:], up to next[lim] (fewer
	// than counted when a malformed record held some).
	start := make([]int, len(lims)+1)
	for i, l := range lims {
		start[i+1] = start[i] + l.n
	}
	next := slices.Clone(start[:len(lims)])
	ents := make([]jentry, start[len(lims)])
	last = nil
	for rec, v := range c.recs {
		if bad[rec] {
			continue
		}
		p.yield()
		err := decodeRecord(v, func(name []byte, at, off, n int, _ bool) error {
			lim, err := lookup(name)
			if err != nil {
				return err
			}
			ents[next[lim]] = jentry{pre: keyPrefix(v[off+lims[lim].lcp : off+n]), rec: uint32(rec), off: uint32(at)}
			next[lim]++
			return nil
		})
		if err != nil {
			return err // it decoded the first time
		}
	}
	out := ents[:0]
	for lim := range lims {
		ents := ents[start[lim]:next[lim]]
		sortEntries(ents, 0, p.yield)
		for i, n := 0, 0; i < len(ents); n++ {
			if n%yieldEntries == yieldEntries-1 {
				p.yield()
			}
			j := i + 1
			for j < len(ents) && ents[j].pre == ents[i].pre {
				j++
			}
			out = c.dedup(out, ents[i:j])
			i = j
		}
		c.ends = append(c.ends, len(out))
	}
	if cap(out) > 2*len(out)+1024 {
		out = slices.Clone(out)
	}
	c.ents = out
	return nil
}

// commonPrefix returns the length of the prefix a and b share.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// apply puts or deletes the entries c.ents[start:end] in the snapshot, in
// tx, reading them from the journal's records, and deletes the buckets its
// deletions emptied. Entries of a limit whose skip is set are dropped.
func (c *compaction) apply(tx *bbolt.Tx, start, end int, skip []bool) error {
	root, j := tx.Bucket(bucketName), tx.Bucket(journalName)
	if root == nil || j == nil {
		return errors.New("bucket missing")
	}
	clear(c.recs)
	defer clear(c.recs) // slices of this transaction's mapping
	var b *bbolt.Bucket // the bucket of limit lim, once looked up
	var emptied []string
	looked, lim, del := false, -1, false
	check := func() { // whether the deletions emptied bucket lim
		if del && b != nil {
			if k, _ := b.Cursor().First(); k == nil {
				emptied = append(emptied, c.names[lim])
			}
		}
	}
	next := 0 // the limit of c.ents[i] is the first next with i < c.ends[next]
	for i, e := range c.ents[start:end] {
		if i%yieldEntries == yieldEntries-1 && c.yield != nil {
			c.yield()
		}
		for start+i >= c.ends[next] {
			next++
		}
		if skip[next] {
			continue
		}
		if next != lim {
			check()
			b, looked, lim, del = nil, false, next, false
		}
		if c.recs[e.rec] == nil {
			if c.recs[e.rec] = j.Get(c.seqs[e.rec]); len(c.recs[e.rec]) != c.sizes[e.rec] {
				return fmt.Errorf("record %x changed", c.seqs[e.rec])
			}
		}
		name := c.names[lim]
		k, v, deleted := c.entry(e)
		if deleted {
			if !looked {
				b, looked = root.Bucket([]byte(name)), true
			}
			if b != nil {
				if err := b.Delete(k); err != nil {
					return fmt.Errorf("delete %s/%q: %w", name, k, err)
				}
				del = true
			}
			continue
		}
		if b == nil {
			var err error
			if b, err = root.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s/%s: %w", bucketName, name, err)
			}
			looked = true
		}
		if err := b.Put(k, v); err != nil {
			return fmt.Errorf("put %s/%q: %w", name, k, err)
		}
	}
	check()
	for _, name := range emptied {
		if err := root.DeleteBucket([]byte(name)); err != nil {
			return fmt.Errorf("delete bucket %s/%s: %w", bucketName, name, err)
		}
	}
	return nil
}

// decodeRecord calls fn for every entry of the journal record v, in order,
// with the limit name, where the entry (its header) and its key start in
// v, the key's length, and whether the entry is a deletion (if not, the
// state is the valueLen bytes after the key). It returns fn's error,
// errMalformedRecord, or an error wrapping ErrVersion for a record of an
// unknown format, possibly after calling fn for some of the entries.
func decodeRecord(v []byte, fn func(name []byte, at, off, n int, del bool) error) error {
	if len(v) == 0 {
		return errMalformedRecord
	}
	if v[0] != recordFormat {
		return fmt.Errorf("%w: journal record format %d (want %d)", ErrVersion, v[0], recordFormat)
	}
	for i := 1; i < len(v); {
		l, w := binary.Uvarint(v[i:])
		if w <= 0 || l == 0 || l > bbolt.MaxKeySize || uint64(len(v)-i-w) < l+4 {
			return errMalformedRecord
		}
		i += w
		name := v[i : i+int(l) : i+int(l)]
		i += int(l)
		count := binary.BigEndian.Uint32(v[i:])
		i += 4
		for range count {
			at := i
			h, w := binary.Uvarint(v[i:])
			if w <= 0 {
				return errMalformedRecord
			}
			i += w
			n, del := h>>1, h&1 == 1
			need := n
			if !del {
				need += valueLen
			}
			if n == 0 || n > bbolt.MaxKeySize || uint64(len(v)-i) < need {
				return errMalformedRecord
			}
			if err := fn(name, at, i, int(n), del); err != nil {
				return err
			}
			i += int(need)
		}
	}
	return nil
}

// persistableName reports whether states under the limit name can be
// stored in the layout above, and persistableKey whether key can.
func persistableName(name string) bool {
	return name != "" && name[0] != 0 && len(name) <= bbolt.MaxKeySize
}

func persistableKey(key []byte) bool {
	return len(key) > 0 && len(key) <= bbolt.MaxKeySize
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
// runs, its index of the journal (16 bytes per journal entry). A flush of
// 300,000 changes keeps 27 MiB. Safe for concurrent use.
func (p *Persistent) Working() int64 {
	return p.flushBytes.Load() + p.compactBytes.Load()
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

// encodeState writes s into v (valueLen bytes).
func encodeState(v []byte, s ratelimit.State) {
	binary.BigEndian.PutUint64(v[0:8], uint64(s.Time))
	binary.BigEndian.PutUint64(v[8:16], math.Float64bits(s.Rate))
}

// decodeState reads a stored value; ok is false for a malformed one: not
// 16 bytes, or a NaN or infinite rate (which no algorithm writes: rates
// saturate at math.MaxFloat64).
func decodeState(v []byte) (ratelimit.State, bool) {
	if len(v) != valueLen {
		return ratelimit.State{}, false
	}
	s := ratelimit.State{
		Time: int64(binary.BigEndian.Uint64(v[0:8])),
		Rate: math.Float64frombits(binary.BigEndian.Uint64(v[8:16])),
	}
	return s, !math.IsNaN(s.Rate) && !math.IsInf(s.Rate, 0)
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
	recs  []rec
	keys  []byte
	spare []rec // for group
}

func (b *batch) add(lim uint16, key []byte, s ratelimit.State, del bool) {
	b.recs = append(b.recs, rec{state: s, off: uint32(len(b.keys)), n: uint32(len(key)), lim: lim, del: del})
	b.keys = append(b.keys, key...)
}

func (b *batch) key(r rec) []byte { return b.keys[r.off : r.off+r.n : r.off+r.n] }

// compact sorts the records by limit and key and keeps the last record of
// each key (records were added in the order the changes happened, which
// is the order of their key bytes), then packs the key bytes.
func (b *batch) compact() {
	slices.SortFunc(b.recs, func(x, y rec) int {
		if x.lim != y.lim {
			return int(x.lim) - int(y.lim)
		}
		return cmp.Or(bytes.Compare(b.key(x), b.key(y)), cmp.Compare(x.off, y.off))
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

// group orders the records by limit, keeping the order of each limit's
// records (the order the changes happened): a counting sort.
func (b *batch) group() {
	top, grouped := 0, true
	for i, r := range b.recs {
		top = max(top, int(r.lim))
		grouped = grouped && (i == 0 || r.lim >= b.recs[i-1].lim)
	}
	if grouped {
		return
	}
	next := make([]int, top+2) // where the next record of each limit goes
	for _, r := range b.recs {
		next[r.lim+1]++
	}
	for i := 1; i < len(next); i++ {
		next[i] += next[i-1]
	}
	out := slices.Grow(b.spare[:0], len(b.recs))[:len(b.recs)]
	for _, r := range b.recs {
		out[next[r.lim]] = r
		next[r.lim]++
	}
	b.recs, b.spare = out, b.recs
}

// bytes returns the heap b's arrays take.
func (b *batch) bytes() int64 {
	return int64(cap(b.recs)+cap(b.spare))*int64(unsafe.Sizeof(rec{})) + int64(cap(b.keys))
}

// release empties b and drops its arrays.
func (b *batch) release() { b.recs, b.keys, b.spare = nil, nil, nil }

// reset empties b for the next flush. It keeps b's arrays when they are at
// most twice as large as this flush needed (or small), so that a steady
// load of changes does not grow them again at every flush, and drops them
// when the load fell.
func (b *batch) reset() {
	if n := max(1<<16, 2*len(b.recs)); cap(b.recs) > n || cap(b.spare) > n {
		b.recs, b.keys, b.spare = nil, nil, nil
		return
	}
	b.recs, b.keys = b.recs[:0], b.keys[:0]
}
