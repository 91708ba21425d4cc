package ratestore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// releaseEvery is the states restored between releaseMappedTx calls.
const releaseEvery = 1 << 18

// restore checks the format, loads every state in one read-only
// transaction, then flushes the deletions and conversions.
func (p *Persistent) restore() error {
	if err := p.checkFormat(); err != nil {
		return err
	}
	stored, err := p.storedParams()
	if err != nil {
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
		// Before loading: a smaller max_keys evicts no offender.
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
	p.noteConversions(conv, p.opts.Now(), "restore") // at or after every converted state's Time
	if len(conv) > 0 {
		p.log.Warn("stored rate states converted to changed limit parameters",
			"limits", slices.Sorted(maps.Keys(conv)), "states", p.stats.Converted)
	}
	p.logNotConverted(p.stats.NotConverted)
	if p.stats.Malformed > 0 {
		p.log.Error("malformed rate states dropped at restore (not a state, or a NaN or infinite rate)",
			"count", p.stats.Malformed, "file", p.db.Path())
	}
	if len(p.lost) > 0 {
		if !p.opts.SkipLost {
			return statedb.RecordsLost(p.db.Path(), p.lost)
		}
		p.stats.Lost, p.stats.LostKeys = int64(len(p.lost)), int64(statedb.LostKeys(p.lost))
	}
	if p.opts.ReadOnly {
		return nil
	}
	if err := p.deleteBuckets(bad); err != nil {
		return err
	}
	if len(p.pending.recs) > 0 || len(p.metaDirty) > 0 {
		if err := p.flushLocked(); err != nil {
			p.log.Error("writing the rate state changes of the restore failed, will retry", "err", err)
		}
	}
	return nil
}

// checkFormat creates the snapshot bucket in a new file; ErrVersion for
// another format.
func (p *Persistent) checkFormat() error {
	var root *bbolt.Bucket
	if err := p.db.View(func(tx *bbolt.Tx) error {
		root = tx.Bucket(bucketName)
		if root == nil {
			return nil
		}
		if v := root.Get(versionKey); string(v) != formatVersion {
			return fmt.Errorf("%w: %s holds rate state of format %q; this ratelimitd reads only format %s: move the file aside",
				ErrVersion, p.db.Path(), v, formatVersion)
		}
		return nil
	}); err != nil || root != nil || p.opts.ReadOnly {
		return err
	}
	return statedb.Update(p.db, func(tx *bbolt.Tx, t *statedb.Tally) error {
		root, err := tx.CreateBucketIfNotExists(bucketName)
		if err != nil {
			return fmt.Errorf("ratestore: create bucket %s: %w", bucketName, err)
		}
		return t.Put(root, rootPath, versionKey, []byte(formatVersion))
	})
}

// storedParams reads ratemeta, ignoring malformed parameters.
func (p *Persistent) storedParams() (map[string]ratelimit.Limit, error) {
	stored := map[string]ratelimit.Limit{}
	err := p.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(metaName)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			raw, err := openMeta(k, v)
			if err != nil {
				p.lost = append(p.lost, statedb.Lost{Path: []string{string(metaName)}, Key: bytes.Clone(k),
					Bytes: len(v), Keys: 1, Err: err})
				return nil
			}
			if l, ok := decodeParams(raw); ok {
				stored[string(k)] = l
			} else {
				p.log.Warn("malformed stored limit parameters ignored", "limit", string(k))
			}
			return nil
		})
	})
	return stored, err
}

// deleteBuckets deletes the snapshot buckets of names.
func (p *Persistent) deleteBuckets(names []string) error {
	if len(names) == 0 {
		return nil
	}
	return statedb.Update(p.db, func(tx *bbolt.Tx, t *statedb.Tally) error {
		root := tx.Bucket(bucketName)
		for _, name := range names {
			if err := root.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
				return fmt.Errorf("ratestore: delete bucket %s/%s: %w", bucketName, name, err)
			}
			t.Touch([]string{string(bucketName), name})
		}
		return nil
	})
}

// restoreTx loads each limit's snapshot merged with its journal (the
// journal wins), dropping malformed and negligible states and converting
// those in conv. bad: the buckets of limits beyond MaxLimits.
func (p *Persistent) restoreTx(tx *bbolt.Tx, conv map[string][2]ratelimit.Limit) (bad []string, err error) {
	var c compaction
	if err := p.collect(tx, &c); err != nil {
		return nil, err
	}
	p.stats.Journal = c.bytes
	p.lost = append(p.lost, c.lost...)
	releaseMappedTx(p.db, tx) // collect read every record
	root := tx.Bucket(bucketName)
	names := limitNames(root, &c)
	r := stateRestore{p: p, tx: tx, now: p.opts.Now()}
	for _, name := range names {
		var ents []jentry
		if i, ok := c.ids[name]; ok {
			ents = c.limitEntries(int(i))
		}
		var b *bbolt.Bucket
		if root != nil {
			b = root.Bucket([]byte(name))
		}
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
		r.name, r.lim = name, lim
		r.cv, r.converting = conv[name]
		_, r.configured = p.opts.Limits[name]
		r.merge(b, &c, ents)
	}
	return bad, nil
}

// limitNames returns the limits in root (may be nil), then those only in c.
func limitNames(root *bbolt.Bucket, c *compaction) (names []string) {
	if root != nil {
		root.ForEachBucket(func(k []byte) error {
			names = append(names, string(k))
			return nil
		})
	}
	for _, name := range c.names {
		if root == nil || root.Bucket([]byte(name)) == nil {
			names = append(names, name)
		}
	}
	return names
}

// stateRestore restores one limit's states.
type stateRestore struct {
	p          *Persistent
	tx         *bbolt.Tx
	now        time.Time
	merged     int // states merged, for releasing the mapping
	name       string
	lim        uint16
	cv         [2]ratelimit.Limit // the old and new parameters, if converting
	converting bool
	configured bool // the limit is in the configuration
}

// merge restores bucket b (may be nil) merged in key order with ents.
func (r *stateRestore) merge(b *bbolt.Bucket, c *compaction, ents []jentry) {
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
				r.cell(k, v)
			}
			k, v = cur.Next()
			continue
		}
		if k != nil && bytes.Equal(k, jk) {
			k, v = cur.Next() // the journal wins
		}
		if _, v, del := c.entry(ents[i]); !del {
			r.state(jk, v)
		}
		i++
	}
}

// cell restores snapshot value v of key k, or records it lost.
func (r *stateRestore) cell(k, v []byte) {
	p := r.p
	cell, err := openCell(k, v)
	if err != nil {
		// Never deleted here: the operator decides (see statedb).
		p.lost = append(p.lost, statedb.Lost{Path: []string{string(bucketName), r.name}, Key: bytes.Clone(k),
			Bytes: len(v), Keys: 1, Err: err})
		return
	}
	r.state(k, cell)
}

// state loads, converts or drops the state v of key k.
func (r *stateRestore) state(k, v []byte) {
	p := r.p
	if r.merged++; r.merged%releaseEvery == 0 {
		releaseMappedTx(p.db, r.tx)
	}
	s, ok := decodeState(v)
	if !ok {
		p.stats.Malformed++
	}
	if r.converting && ok {
		// Judged under the parameters it was written with.
		c, converted := p.convert(r.cv, s, r.now)
		if !converted { // kept as stored, logged once (restore)
			if p.mem.load(r.lim, k, s) {
				p.stats.Restored++
			}
			return
		}
		if s = c; !s.IsZero() {
			p.stats.Converted++
			if p.mem.load(r.lim, k, s) {
				p.stats.Restored++
				if !p.opts.ReadOnly {
					p.pending.add(r.lim, k, s, false)
				}
			}
			return
		}
	}
	if !ok || r.converting || p.negligible(r.name, s, r.now) {
		if !p.opts.ReadOnly {
			p.pending.add(r.lim, k, ratelimit.State{}, true)
		}
		p.stats.Dropped++
	} else if p.mem.load(r.lim, k, s) {
		p.stats.Restored++
		if !r.configured && p.opts.Limits != nil {
			p.stats.Unconfigured++
		}
	}
}
