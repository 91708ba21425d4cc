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
	// compactPairBytes per state held) bytes: about half the snapshot, so
	// that rewriting the snapshot's pages is paid for by as many cheap
	// appends (BenchmarkCompact, BenchmarkPersist2M).
	compactMinBytes  = 32 << 20
	compactPairBytes = 48
	// compactPiece is the keys one compaction transaction writes (a range
	// of sorted keys: few leaf pages), compactDeleteMax the journal
	// records one deletes.
	compactPiece     = 20_000
	compactDeleteMax = 1024
)

// errCompactionStopped is returned by compact when it was stopped between
// two pieces.
var errCompactionStopped = errors.New("ratestore: rate journal compaction stopped")

// compact applies the journal to the snapshot in small transactions:
//
//  1. collect, in a read-only transaction, reads every journal record (up
//     to sequence S) and sorts the last entry of each (limit, key);
//  2. pieceKeys entries at a time, in key order, it puts or deletes them in
//     the snapshot, reading keys and states from the records again;
//  3. it deletes the records up to S, oldest first.
//
// Flushes run between the transactions and append records above S. The
// stored state (snapshot plus journal) is the same throughout, as records
// hold absolute states, so a crash at any moment loses nothing. It returns
// errCompactionStopped when stop is closed between two transactions.
// Entries of limits mem does not know are dropped. An unreadable record
// (damaged since restore) is neither applied nor deleted, but logged and
// recorded as the last error; the next start refuses the file. A record of
// an unknown version fails with ErrVersion.
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
		return fmt.Errorf("ratestore: compaction of %s: %w", journalName, err)
	}
	c.recs = nil // the mapping of that transaction
	if len(c.lost) > 0 {
		// Damaged since the restore checked every record: kept, for the
		// operator to salvage or give up at the next start.
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
		seqs := c.seqs[i:min(i+compactDeleteMax, len(c.seqs))]
		err := p.update(func(tx *bbolt.Tx, t *statedb.Tally) error {
			j := tx.Bucket(journalName)
			for n, seq := range seqs {
				if c.bad[i+n] {
					continue // kept for the operator: see compact
				}
				if err := t.Delete(j, journalPath, seq); err != nil {
					return fmt.Errorf("ratestore: delete %s/%x: %w", journalName, seq, err)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("ratestore: compaction of %s: %w", journalName, err)
		}
		var n int64
		for k, size := range c.sizes[i : i+len(seqs)] {
			if !c.bad[i+k] {
				n += int64(size)
			}
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
	// The last entry of each (limit, key), sorted by limit and key: those
	// of limit i are ents[ends[i-1]:ends[i]].
	ents  []jentry
	ends  []int
	yield func() // Persistent.yield
	// lost are the unreadable records, bad their indexes in seqs.
	lost  []statedb.Lost
	bad   map[int]bool
	cells []byte // the snapshot values of one apply
}

// jentry is a journal entry, 16 bytes: the entry at offset off of record
// rec. pre is the 8 bytes of its key after the prefix all keys of its
// limit share (zero-padded, big-endian), so that sorting need not read the
// keys from the mapping.
type jentry struct {
	pre      uint64
	rec, off uint32
}

// entry returns the key of e, its state unless it is a deletion, and
// whether it is.
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

// comparePre orders entries by pre, then in journal order: key order but
// for runs of equal pre (see dedup).
func comparePre(x, y jentry) int {
	switch {
	case x.pre != y.pre:
		return cmp.Compare(x.pre, y.pre)
	case x.rec != y.rec:
		return cmp.Compare(x.rec, y.rec)
	}
	return cmp.Compare(x.off, y.off)
}

// dedup appends to out the last entry of each key of run (entries of
// equal pre, in journal order), in key order.
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

// radixMin is the size below which sortEntries sorts by insertion.
const radixMin = 32

// sortEntries sorts ents, whose pre agree in their first shift bytes, by
// comparePre in place without reading keys: an MSD radix sort (American
// flag sort), insertion sort for small ranges. yield is called before each
// bucket of at least yieldEntries entries.
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

// keyPrefix returns the first 8 bytes of k, zero-padded, big-endian.
func keyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var b [8]byte
	copy(b[:], k)
	return binary.BigEndian.Uint64(b[:])
}

// collect reads every journal record in tx into c (c.recs are slices of
// the mapping, valid until tx ends), sorts the entries and keeps the last
// of each key, in two passes over the records (countEntries,
// placeEntries). An unreadable record goes to c.lost and c.bad. A record
// of an unknown version fails with ErrVersion.
func (p *Persistent) collect(tx *bbolt.Tx, c *compaction) error {
	j := tx.Bucket(journalName)
	if j == nil {
		return nil
	}
	ix := journalLimits{ids: map[string]uint16{}}
	bad, err := p.countEntries(j, c, &ix)
	if err != nil {
		return err
	}
	ents, start, next, err := p.placeEntries(c, &ix, bad)
	if err != nil {
		return err
	}
	p.sortDedup(c, ents, start, next)
	return nil
}

// journalLimits indexes the limits named in the journal.
type journalLimits struct {
	lims    []journalLimit
	ids     map[string]uint16
	last    []byte // the name of lastLim: records hold groups of one limit
	lastLim uint16
}

// journalLimit is what countEntries learns of a limit.
type journalLimit struct {
	n     int    // entries
	first []byte // key of the first entry
	lcp   int    // length of the prefix all keys share
}

// lookup returns the index of the limit name, adding it if new.
func (ix *journalLimits) lookup(c *compaction, name []byte) (uint16, error) {
	if ix.last != nil && bytes.Equal(name, ix.last) {
		return ix.lastLim, nil
	}
	lim, ok := ix.ids[string(name)]
	if !ok {
		if len(c.names) > math.MaxUint16 {
			return 0, errMalformedRecord
		}
		lim = uint16(len(c.names))
		ix.ids[string(name)] = lim
		c.names = append(c.names, string(name))
		ix.lims = append(ix.lims, journalLimit{})
	}
	ix.last, ix.lastLim = name, lim
	return lim, nil
}

// countEntries is collect's first pass: it reads the records of j into
// c, counting each limit's entries and their keys' common prefix, and
// returns the indexes of the unreadable ones (added to c.lost).
func (p *Persistent) countEntries(j *bbolt.Bucket, c *compaction, ix *journalLimits) (bad map[int]bool, err error) {
	cur := j.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if v == nil {
			continue // a bucket: not written by this package
		}
		p.yield()
		body, err := recordBody(k, v)
		if err == nil {
			err = decodeRecord(body, func(name []byte, _, off, n int, _ bool) error {
				lim, err := ix.lookup(c, name)
				if err != nil {
					return err
				}
				l, key := &ix.lims[lim], body[off:off+n]
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
			return nil, err
		}
		if err != nil {
			if bad == nil {
				bad = map[int]bool{}
			}
			bad[len(c.recs)] = true
			c.lost = append(c.lost, statedb.Lost{Path: []string{string(journalName)}, Key: bytes.Clone(k),
				Bytes: len(v), Keys: recordKeys(v), Err: err})
		}
		c.seqs = append(c.seqs, bytes.Clone(k))
		c.sizes = append(c.sizes, len(v))
		c.recs = append(c.recs, body)
		c.bytes += int64(len(v))
	}
	c.bad = bad
	return bad, nil
}

// placeEntries is collect's second pass: it places each entry of the
// sound records in its limit's part of ents, ents[start[lim]:next[lim]].
func (p *Persistent) placeEntries(c *compaction, ix *journalLimits, bad map[int]bool) (ents []jentry, start, next []int, err error) {
	lims := ix.lims
	start = make([]int, len(lims)+1)
	for i, l := range lims {
		start[i+1] = start[i] + l.n
	}
	next = slices.Clone(start[:len(lims)])
	ents = make([]jentry, start[len(lims)])
	ix.last = nil
	for rec, v := range c.recs {
		if bad[rec] {
			continue
		}
		p.yield()
		err := decodeRecord(v, func(name []byte, at, off, n int, _ bool) error {
			lim, err := ix.lookup(c, name)
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

// sortDedup sorts each limit's entries and keeps the last of each key,
// into c.ents and c.ends.
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

// apply puts or deletes the entries c.ents[start:end] in the snapshot in
// tx, skipping limits with skip set, and deletes the buckets emptied.
func (c *compaction) apply(tx *bbolt.Tx, t *statedb.Tally, start, end int, skip []bool) error {
	root, j := tx.Bucket(bucketName), tx.Bucket(journalName)
	if root == nil || j == nil {
		return errors.New("bucket missing")
	}
	clear(c.recs)
	defer clear(c.recs) // slices of this transaction's mapping
	// BoltDB keeps the values put until commit: one array, never grown.
	c.cells = slices.Grow(c.cells[:0], (end-start)*cellLen)
	var b *bbolt.Bucket // the bucket of limit lim, once looked up
	var path []string   // its path in the manifest
	var cur *bbolt.Cursor
	// stored reports whether k is in b (one cursor per bucket: a Get
	// would allocate one per key); the manifest counts new keys.
	stored := func(k []byte) bool {
		if cur == nil {
			cur = b.Cursor()
		}
		got, _ := cur.Seek(k)
		return bytes.Equal(got, k)
	}
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
			b, looked, lim, del, cur = nil, false, next, false, nil
			path = []string{string(bucketName), c.names[lim]}
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
			looked = true
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
