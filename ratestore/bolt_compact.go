package ratestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
	"unsafe"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

const (
	// Tick compacts once the journal holds max(compactMinBytes,
	// compactPairBytes per state held) bytes: about half the snapshot.
	compactMinBytes  = 32 << 20
	compactPairBytes = 48
	// compactPiece: keys per compaction transaction; compactDeleteMax:
	// journal records deleted per transaction.
	compactPiece     = 20_000
	compactDeleteMax = 1024
)

// errCompactionStopped is returned by compact when stopped between pieces.
var errCompactionStopped = errors.New("ratestore: rate journal compaction stopped")

// compact applies the journal (records up to sequence S, last entry of each
// key) to the snapshot pieceKeys keys per transaction, then deletes the
// records up to S; flushes run between. Records hold absolute states, so a
// crash loses nothing. Errors: errCompactionStopped (stop closed; nil:
// never), ErrVersion. Unreadable records are logged and kept.
func (p *Persistent) compact(stop <-chan struct{}) error {
	p.cmu.Lock()
	defer p.cmu.Unlock()
	stopped := func() bool {
		select {
		case <-stop:
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
	if err := damageSafe(p.db, func() error { return p.db.View(func(tx *bbolt.Tx) error { return p.collect(tx, &c) }) }); err != nil {
		return fmt.Errorf("ratestore: compaction of %s: %w", journalName, err)
	}
	c.recs = nil // the mapping of that transaction
	if len(c.lost) > 0 {
		// Damaged since restore: kept for the next start to refuse.
		p.mu.Lock()
		p.stats.LastError, p.stats.LastErrorAt = statedb.RecordsLost(p.db.Path(), c.lost).Error(), p.opts.Now()
		p.mu.Unlock()
		p.log.Error("unreadable rate journal records kept, not compacted", "records", len(c.lost),
			"keys", statedb.LostKeys(c.lost), "file", p.db.Path())
	}
	if len(c.seqs) == len(c.lost) {
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
		if err := p.update(func(tx *bbolt.Tx, t *statedb.Tally) error { return c.apply(tx, t, i, end, skip) }); err != nil {
			return fmt.Errorf("ratestore: compaction of %s: %w", journalName, err)
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
		var n int64 // bytes deleted
		err := p.update(func(tx *bbolt.Tx, t *statedb.Tally) error {
			j := tx.Bucket(journalName)
			for x := i; x < min(i+compactDeleteMax, len(c.seqs)); x++ {
				if c.bad[x] {
					continue // kept for the operator: see compact
				}
				if err := t.Delete(j, journalPath, c.seqs[x]); err != nil {
					return fmt.Errorf("ratestore: delete %s/%x: %w", journalName, c.seqs[x], err)
				}
				n += int64(c.sizes[x])
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("ratestore: compaction of %s: %w", journalName, err)
		}
		p.mu.Lock()
		p.stats.Journal -= n
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
	seqs  [][]byte          // the records' keys (sequences), in order
	sizes []int             // and their lengths
	recs  [][]byte          // the records, valid during a transaction
	bytes int64             // the sum of sizes
	names []string          // limit names, indexed by limit index
	ids   map[string]uint16 // and the index of each
	lims  []journalLimit    // and what collect's first pass learns of it
	// last is the name of lastLim (lookup): records hold groups of one limit.
	last    []byte
	lastLim uint16
	// Last entry per (limit, key), sorted; limit i: ents[ends[i-1]:ends[i]].
	ents  []jentry
	ends  []int
	yield func() // Persistent.yield
	// lost are the unreadable records, bad their indexes in seqs.
	lost  []statedb.Lost
	bad   map[int]bool
	cells []byte // the snapshot values of one apply
}

// jentry is a 16-byte journal entry at offset off of record rec; pre is 8
// key bytes after its limit's common prefix (big-endian, zero-padded).
type jentry struct {
	pre      uint64
	rec, off uint32
}

// entry returns e's key, state, and whether it is a deletion.
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

// comparePre orders entries by pre, then journal order.
func comparePre(x, y jentry) int {
	return cmp.Or(cmp.Compare(x.pre, y.pre), cmp.Compare(x.rec, y.rec), cmp.Compare(x.off, y.off))
}

// dedup appends the last entry of each key of run (equal pre), in key order.
func (c *compaction) dedup(out, run []jentry) []jentry {
	last := run[len(run)-1]
	if len(run) == 1 || !slices.ContainsFunc(run, func(e jentry) bool { return !bytes.Equal(c.key(e), c.key(last)) }) {
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

// radixMin is the size below which sortEntries sorts by comparison.
const radixMin = 32

// sortEntries sorts ents (pre agreeing in the first shift bytes) by
// comparePre in place: MSD radix (American flag) sort.
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
		// Bucket d is ents[start[d]:start[d]+count[d]], next[d] its next slot.
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
	slices.SortFunc(ents, comparePre) // small, or all of equal pre
}

// keyPrefix returns the first 8 bytes of k, zero-padded, big-endian.
func keyPrefix(k []byte) uint64 {
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// collect reads the journal in tx into c (slices valid until tx ends) and
// keeps the last entry of each key; unreadable records go to c.lost.
// Errors: ErrVersion.
func (p *Persistent) collect(tx *bbolt.Tx, c *compaction) error {
	j := tx.Bucket(journalName)
	if j == nil {
		return nil
	}
	c.ids = map[string]uint16{}
	if err := p.countEntries(j, c); err != nil {
		return err
	}
	ents, start, next, err := p.placeEntries(c)
	if err != nil {
		return err
	}
	p.sortDedup(c, ents, start, next)
	c.lims, c.last = nil, nil // slices of tx, needed no more
	return nil
}

// journalLimit is what countEntries learns of a limit.
type journalLimit struct {
	n     int    // entries
	first []byte // key of the first entry
	lcp   int    // length of the prefix all keys share
}

// lookup returns the index of the limit name, adding it if new.
func (c *compaction) lookup(name []byte) (uint16, error) {
	if c.last != nil && bytes.Equal(name, c.last) {
		return c.lastLim, nil
	}
	lim, ok := c.ids[string(name)]
	if !ok {
		if len(c.names) > math.MaxUint16 {
			return 0, errMalformedRecord
		}
		lim = uint16(len(c.names))
		c.ids[string(name)] = lim
		c.names = append(c.names, string(name))
		c.lims = append(c.lims, journalLimit{})
	}
	c.last, c.lastLim = name, lim
	return lim, nil
}

// countEntries, collect's first pass, counts each limit's entries and
// common key prefix and notes the unreadable records (c.bad, c.lost).
func (p *Persistent) countEntries(j *bbolt.Bucket, c *compaction) error {
	cur := j.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if v == nil {
			continue // a bucket: not written by this package
		}
		p.yield()
		body, err := recordBody(k, v)
		if err == nil {
			err = decodeRecord(body, func(name []byte, _, off, n int, _ bool) error {
				lim, err := c.lookup(name)
				if err != nil {
					return err
				}
				l, key := &c.lims[lim], body[off:off+n]
				if l.n == 0 {
					l.first, l.lcp = key, n
				} else {
					l.lcp = commonPrefix(l.first[:l.lcp], key)
				}
				l.n++
				return nil
			})
		}
		if errors.Is(err, ErrVersion) {
			return err
		}
		if err != nil {
			if c.bad == nil {
				c.bad = map[int]bool{}
			}
			c.bad[len(c.recs)] = true
			c.lost = append(c.lost, statedb.Lost{Path: []string{string(journalName)}, Key: bytes.Clone(k),
				Bytes: len(v), Keys: recordKeys(v), Err: err})
		}
		c.seqs = append(c.seqs, bytes.Clone(k))
		c.sizes = append(c.sizes, len(v))
		c.recs = append(c.recs, body)
		c.bytes += int64(len(v))
	}
	return nil
}

// placeEntries, collect's second pass, fills ents[start[lim]:next[lim]].
func (p *Persistent) placeEntries(c *compaction) (ents []jentry, start, next []int, err error) {
	lims := c.lims
	start = make([]int, len(lims)+1)
	for i, l := range lims {
		start[i+1] = start[i] + l.n
	}
	next = slices.Clone(start[:len(lims)])
	ents = make([]jentry, start[len(lims)])
	c.last = nil
	for rec, v := range c.recs {
		if c.bad[rec] {
			continue
		}
		p.yield()
		err := decodeRecord(v, func(name []byte, at, off, n int, _ bool) error {
			lim, err := c.lookup(name)
			if err != nil {
				return err
			}
			ents[next[lim]] = jentry{pre: keyPrefix(v[off+lims[lim].lcp : off+n]), rec: uint32(rec), off: uint32(at)}
			next[lim]++
			return nil
		})
		if err != nil {
			return nil, nil, nil, err // it decoded the first time
		}
	}
	return ents, start, next, nil
}

// sortDedup sorts and dedups each limit's entries into c.ents, c.ends.
func (p *Persistent) sortDedup(c *compaction, ents []jentry, start, next []int) {
	out := ents[:0]
	for lim := range next {
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

// apply writes c.ents[start:end] to the snapshot, skipping limits in skip.
func (c *compaction) apply(tx *bbolt.Tx, t *statedb.Tally, start, end int, skip []bool) error {
	root, j := tx.Bucket(bucketName), tx.Bucket(journalName)
	if root == nil || j == nil {
		return errors.New("bucket missing")
	}
	clear(c.recs)
	defer clear(c.recs) // slices of this transaction's mapping
	// BoltDB keeps the values put until commit: one array, never grown.
	c.cells = slices.Grow(c.cells[:0], (end-start)*cellLen)
	var b *bbolt.Bucket // the bucket of limit lim, nil until created
	var path []string   // its path in the manifest
	var cur *bbolt.Cursor
	// stored reports whether k is in b (one cursor per bucket).
	stored := func(k []byte) bool {
		if cur == nil {
			cur = b.Cursor()
		}
		got, _ := cur.Seek(k)
		return bytes.Equal(got, k)
	}
	var emptied []string
	lim, del := -1, false
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
			lim, del, cur = next, false, nil
			b, path = root.Bucket([]byte(c.names[lim])), []string{string(bucketName), c.names[lim]}
		}
		if c.recs[e.rec] == nil {
			if c.recs[e.rec] = j.Get(c.seqs[e.rec]); len(c.recs[e.rec]) != c.sizes[e.rec] {
				return fmt.Errorf("record %x changed", c.seqs[e.rec])
			}
		}
		name := c.names[lim]
		k, v, deleted := c.entry(e)
		if deleted {
			if b != nil && stored(k) {
				if err := b.Delete(k); err != nil {
					return fmt.Errorf("delete %s/%q: %w", name, k, err)
				}
				t.Added(path, -1)
				del = true
			}
			continue
		}
		if b == nil {
			var err error
			if b, err = root.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s/%s: %w", bucketName, name, err)
			}
		}
		at := len(c.cells)
		c.cells = statedb.Seal(c.cells, k, cellVersion, v)
		if !stored(k) {
			t.Added(path, 1)
		}
		if err := b.Put(k, c.cells[at:len(c.cells):len(c.cells)]); err != nil {
			return fmt.Errorf("put %s/%q: %w", name, k, err)
		}
	}
	check()
	for _, name := range emptied {
		if err := root.DeleteBucket([]byte(name)); err != nil {
			return fmt.Errorf("delete bucket %s/%s: %w", bucketName, name, err)
		}
		t.Touch([]string{string(bucketName), name})
	}
	return nil
}
