package ratestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"
	"unsafe"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Tick sweeps every minute, flushes (the sweep's deletions too, so
// the last Tick leaves the file as memory is) and starts a compaction when
// due (statedb.Flusher). It returns the flush's error.
func (p *Persistent) Tick() error {
	if p.opts.ReadOnly {
		return nil
	}
	if p.sweeps() && time.Since(p.lastSweep) >= p.sweepEvery {
		p.lastSweep = time.Now()
		if n := p.Sweep(); n > 0 {
			p.log.Debug("swept negligible rate states", "count", n)
		}
	}
	err := p.Flush()
	if errors.Is(err, ErrClosed) {
		return nil
	}
	if p.compactDue() && p.compacting.CompareAndSwap(false, true) {
		go func() {
			defer p.compacting.Store(false)
			defer p.release()
			if err := p.compact(p.done); err != nil && !errors.Is(err, errCompactionStopped) {
				p.log.Error("rate journal compaction failed, will retry", "err", err) // before it is counted
				p.mu.Lock()
				p.stats.CompactionFailures++
				p.stats.LastError, p.stats.LastErrorAt = err.Error(), p.opts.Now()
				p.mu.Unlock()
			}
		}()
	}
	p.release()
	return err
}

// release drops BoltDB's mapped pages from resident memory (Linux).
func (p *Persistent) release() {
	if err := p.db.View(func(tx *bbolt.Tx) error { return releaseMappedTx(p.db, tx) }); err != nil {
		p.log.Debug("madvise of the BoltDB mapping failed", "err", err)
	}
}

// Sweep drops the states negligible now and returns how many.
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
	return !p.opts.ReadOnly && p.opts.Limits != nil
}

// Flush commits every change since the last flush in one transaction (kept
// for the next on failure). Errors: ErrClosed, ErrReadOnly, BoltDB's.
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

// damageSafe runs fn, turning a BoltDB panic or fault into ErrDamaged.
func damageSafe(db *bbolt.DB, fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: %v", ErrDamaged, db.Path(), r)
		}
	}()
	return fn()
}

// update runs fn in a read-write transaction with a statedb.Tally.
func (p *Persistent) update(fn func(*bbolt.Tx, *statedb.Tally) error) error {
	return damageSafe(p.db, func() error { return statedb.Update(p.db, fn) })
}

// flushLocked is Flush under mu.
func (p *Persistent) flushLocked() error {
	if p.beforeTake != nil {
		p.beforeTake()
	}
	retry := len(p.pending.recs) > 0 // the changes of a failed flush
	p.mem.takeDirty(p.pending.add, p.yield)
	if len(p.pending.recs) == 0 && len(p.metaDirty) == 0 {
		// Idle for an interval: drop the arrays.
		p.pending.release()
		p.rbuf, p.rends = nil, nil
		p.flushBytes.Store(0)
		p.stats.LastFlushAt = p.opts.Now()
		return nil
	}
	// Group by limit; after failed flushes keep one change per key.
	if retry {
		p.pending.compact()
	} else {
		p.pending.group()
	}
	start := time.Now()
	written, deleted, skipped := p.encode()
	var err error
	if len(p.rends) > 0 || len(p.metaDirty) > 0 {
		err = p.update(func(tx *bbolt.Tx, t *statedb.Tally) error {
			if err := p.putMeta(tx, t); err != nil {
				return err
			}
			return p.appendJournal(tx, t)
		})
	}
	if err != nil {
		err = fmt.Errorf("ratestore: flush of %d rate states: %w", len(p.pending.recs), err)
		p.stats.Failures++
		p.stats.Pending = len(p.pending.recs)
		p.stats.LastError, p.stats.LastErrorAt = err.Error(), p.opts.Now()
		return err
	}
	p.metaDirty = nil
	n := len(p.pending.recs)
	p.stats.Journal += int64(len(p.rbuf))
	p.stats.Flushes++
	p.stats.Written += written
	p.stats.Deleted += deleted
	p.stats.Skipped += skipped
	p.stats.Pending = 0
	p.stats.LastFlush = time.Since(start)
	p.stats.LastFlushAt = p.opts.Now()
	p.pending.reset()
	if cap(p.rbuf) > 4*statedb.MaxRecordBytes {
		p.rbuf = nil
	}
	p.flushBytes.Store(p.pending.bytes() + int64(cap(p.rbuf)) + int64(cap(p.rends))*int64(unsafe.Sizeof(0)))
	if p.afterFlush != nil {
		p.afterFlush(n)
	}
	return nil
}

// encode writes the pending batch as journal records into p.rbuf (ends
// in p.rends, checksums zero) and counts the changes.
func (p *Persistent) encode() (written, deleted, skipped int64) {
	buf, ends := p.rbuf[:0], p.rends[:0]
	var names []string
	recs := p.pending.recs
	start, keys := 0, 0   // of the current record in buf, and its entries
	group, count := -1, 0 // where the open group's count goes
	closeGroup := func() {
		if group >= 0 {
			binary.BigEndian.PutUint32(buf[group:], uint32(count))
			group = -1
		}
	}
	closeRecord := func() {
		closeGroup()
		binary.BigEndian.PutUint16(buf[start+1:], uint16(keys))
		buf = append(buf, 0, 0, 0, 0) // the checksum
		ends = append(ends, len(buf))
		start, keys = len(buf), 0
	}
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
		for n, r := range recs[i:j] {
			if n%yieldEntries == yieldEntries-1 {
				p.yield()
			}
			key := p.pending.key(r)
			if len(key) == 0 || len(key) > bbolt.MaxKeySize {
				skipped++
				continue
			}
			if len(buf) > start && (len(buf)-start >= statedb.MaxRecordBytes || keys >= statedb.MaxRecordKeys) {
				closeRecord()
			}
			if len(buf) == start {
				buf = append(buf, recordVersion, 0, 0)
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
				buf = appendState(buf, r.state)
				written++
			}
			count++
			keys++
		}
		closeGroup()
		i = j
	}
	if len(buf) > start {
		closeRecord()
	}
	p.rbuf, p.rends = buf, ends
	return written, deleted, skipped
}

// putMeta stores the parameters in p.metaDirty.
func (p *Persistent) putMeta(tx *bbolt.Tx, t *statedb.Tally) error {
	if len(p.metaDirty) == 0 {
		return nil
	}
	b, err := tx.CreateBucketIfNotExists(metaName)
	if err != nil {
		return fmt.Errorf("ratestore: create bucket %s: %w", metaName, err)
	}
	for name, l := range p.metaDirty {
		if err := t.Put(b, metaPath, []byte(name), statedb.Seal(nil, []byte(name), metaVersion, encodeParams(l))); err != nil {
			return fmt.Errorf("ratestore: put %s/%s: %w", metaName, name, err)
		}
	}
	return nil
}

// appendJournal appends and seals the records of p.rbuf to the journal.
func (p *Persistent) appendJournal(tx *bbolt.Tx, t *statedb.Tally) error {
	j, err := tx.CreateBucketIfNotExists(journalName)
	if err != nil {
		return fmt.Errorf("ratestore: create bucket %s: %w", journalName, err)
	}
	if k, _ := j.Cursor().Last(); len(k) == 8 && binary.BigEndian.Uint64(k) > j.Sequence() {
		if err := j.SetSequence(binary.BigEndian.Uint64(k)); err != nil {
			return err
		}
		t.Touch(journalPath)
	}
	prev := 0
	for _, end := range p.rends {
		seq, err := j.NextSequence()
		if err != nil {
			return err
		}
		key, rec := binary.BigEndian.AppendUint64(nil, seq), p.rbuf[prev:end]
		binary.BigEndian.PutUint32(rec[len(rec)-4:], statedb.Sum(key, rec[:len(rec)-4]))
		if err := t.Append(j, journalPath, key, rec); err != nil {
			return fmt.Errorf("ratestore: append to %s: %w", journalName, err)
		}
		prev = end
	}
	return nil
}

// compactDue reports whether the journal passed the compaction threshold.
func (p *Persistent) compactDue() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	j := p.stats.Journal
	return j > 0 && j >= max(p.compactMin, p.compactPerPair*int64(p.mem.Len()))
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

// compact sorts the records, keeps the last per key, packs the keys.
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

// group orders the records by limit, stably (a counting sort).
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

// reset empties b, keeping arrays not oversized.
func (b *batch) reset() {
	if n := max(1<<16, 2*len(b.recs)); cap(b.recs) > n || cap(b.spare) > n {
		b.recs, b.keys, b.spare = nil, nil, nil
		return
	}
	b.recs, b.keys = b.recs[:0], b.keys[:0]
}
