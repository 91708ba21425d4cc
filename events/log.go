package events

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// The buckets the Log owns and their paths in the manifest (statedb.Tally).
var (
	bucketLog  = []byte("events/log")
	bucketMeta = []byte("events/meta")
	metaCount  = []byte("count")
	metaFormat = []byte("format")
	logPath    = []string{"events/log"}
	metaPath   = []string{"events/meta"}
)

// pruneBatch bounds the records one pruning transaction deletes.
const pruneBatch = 50_000

// Options configure a Log; zero fields take the defaults in parentheses.
type Options struct {
	// MaxAge (30 days) and MaxCount (1,000,000) bound the records of
	// Decisions, ActionMaxAge (365 days) and ActionMaxCount (100,000)
	// those of other actions.
	MaxAge         time.Duration
	MaxCount       int
	ActionMaxAge   time.Duration
	ActionMaxCount int
	// Coalesce (1m): the decisions of one key, limit and action within one
	// interval (aligned to the Unix epoch) are one record with a count.
	Coalesce time.Duration
	// QueueSize (50,000) bounds each class's queued events and the
	// decisions open for coalescing.
	QueueSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) withDefaults() {
	orDefault(&o.MaxAge, 30*24*time.Hour)
	orDefault(&o.MaxCount, 1_000_000)
	orDefault(&o.ActionMaxAge, 365*24*time.Hour)
	orDefault(&o.ActionMaxCount, 100_000)
	orDefault(&o.Coalesce, time.Minute)
	orDefault(&o.QueueSize, 50_000)
	if o.Now == nil {
		o.Now = time.Now
	}
}

func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// bounds returns class c's age and count bounds.
func (o *Options) bounds(c class) (time.Duration, int) {
	if c == classAction {
		return o.ActionMaxAge, o.ActionMaxCount
	}
	return o.MaxAge, o.MaxCount
}

// Stats are a Log's counters since Open: Recorded queued, Coalesced into
// an earlier record, Dropped lost, Written, Pruned by the bounds, Pending
// now, Stored in the file (Pruned and Stored: Decisions; Actions apart).
type Stats struct {
	Recorded       uint64 `json:"recorded"`
	Coalesced      uint64 `json:"coalesced"`
	Dropped        uint64 `json:"dropped"`
	ActionsDropped uint64 `json:"actions_dropped"`
	Written        uint64 `json:"written"`
	Pruned         uint64 `json:"pruned"`
	ActionsPruned  uint64 `json:"actions_pruned"`
	Pending        int    `json:"pending"`
	Stored         int    `json:"stored"`
	ActionsStored  int    `json:"actions_stored"`
	Failures       uint64 `json:"failures"` // failed flushes
	LastError      string `json:"last_error,omitempty"`
}

// Log is the event history in a BoltDB file. Create it with Open.
type Log struct {
	db       *bolt.DB
	opts     Options
	readOnly bool

	// mu guards queue, open, dirty, every pending, closed and stats.
	mu     sync.Mutex
	queue  queue
	open   map[coalesceKey]*pending
	dirty  []*pending // written, with a count grown since
	swept  int64      // the interval of expire's last sweep
	closed bool
	stats  Stats

	// fmu serialises flushes and pruning, and guards count.
	fmu   sync.Mutex
	count [numClasses]int
}

// queue holds the events waiting for a flush, encoded at Record.
type queue struct {
	recs  []queued
	n     [numClasses]int // records per class
	bytes [numClasses]int // bytes per class
}

// queued is one queued event: its record and a decision's totals.
type queued struct {
	c   class
	t   int64
	rec []byte
	p   *pending
}

// coalesceKey names the decisions coalesced into one record.
type coalesceKey struct{ key, limit, action string }

// pending is a coalesced decision's totals; guarded by Log.mu.
type pending struct {
	ck     coalesceKey
	window int64 // Unix ns / Coalesce
	count  uint32
	last   int64 // Unix ns
	rate   float64
	key    []byte // the record's key once written
	stored uint32 // the count written or being written
	dirty  bool   // in Log.dirty
}

// maxQueueBytes bounds the encoded events of a class queued.
const maxQueueBytes = 32 << 20

func (q *queue) add(r queued) {
	q.recs = append(q.recs, r)
	q.n[r.c]++
	q.bytes[r.c] += len(r.rec)
}

// full reports whether q holds as many records of class c as it may.
func (q *queue) full(c class, size int) bool {
	return q.n[c] >= size || q.bytes[c] >= maxQueueBytes
}

// Open returns the Log stored in db, creating its buckets unless
// read-only. Errors: another format, BoltDB's.
func Open(db *bolt.DB, opts Options) (*Log, error) {
	opts.withDefaults()
	l := &Log{db: db, opts: opts, readOnly: db.IsReadOnly(), open: map[coalesceKey]*pending{}}
	if l.readOnly {
		return l, db.View(func(tx *bolt.Tx) error {
			l.count = storedCount(tx)
			return nil
		})
	}
	err := statedb.Update(db, func(tx *bolt.Tx, t *statedb.Tally) error {
		lb, err := tx.CreateBucketIfNotExists(bucketLog)
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		mb, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return fmt.Errorf("events: %w", err)
		}
		t.Ensure(logPath)
		t.Ensure(metaPath)
		switch v := mb.Get(metaFormat); {
		case v == nil && lb.Stats().KeyN == 0:
			if err := t.Put(mb, metaPath, metaFormat, []byte{formatVersion}); err != nil {
				return fmt.Errorf("events: %w", err)
			}
		case len(v) != 1 || v[0] != formatVersion:
			return fmt.Errorf("events: %s holds an event log of format %x; this ratelimitd reads only format %d: move the file aside",
				db.Path(), v, formatVersion)
		}
		l.count = storedCount(tx)
		return putCount(t, mb, l.count)
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Formats describes the event log's records for statedb.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketLog), Check: func(k, v []byte) (int, error) {
			body, err := recordBody(k, v)
			if err == nil {
				_, err = decode(k, body)
			}
			return 1, err
		}},
		{Bucket: string(bucketMeta)},
	}
}

// storedCount reads events/meta's record counts, or counts the records.
func storedCount(tx *bolt.Tx) (n [numClasses]int) {
	if mb := tx.Bucket(bucketMeta); mb != nil {
		if v := mb.Get(metaCount); len(v) == 8*numClasses { // a uint64 per class, big-endian
			for c := range n {
				n[c] = int(binary.BigEndian.Uint64(v[8*c:]))
			}
			return n
		}
	}
	if lb := tx.Bucket(bucketLog); lb != nil {
		c := lb.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) > 0 && k[0] < byte(numClasses) {
				n[k[0]]++
			}
		}
	}
	return n
}

func putCount(t *statedb.Tally, mb *bolt.Bucket, n [numClasses]int) error {
	var v []byte
	for _, x := range n {
		v = binary.BigEndian.AppendUint64(v, uint64(x))
	}
	if err := t.Put(mb, metaPath, metaCount, v); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// Record queues e for the next flush without waiting, or adds a decision
// to its coalesced record; with the queue full, or l read-only or closed,
// it is dropped.
func (l *Log) Record(e Event) {
	if l == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = l.opts.Now()
	}
	c := classOf(e.Action)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.readOnly {
		l.drop(c)
		return
	}
	if c == classDecision && l.coalesce(&e) {
		l.stats.Coalesced++
		return
	}
	if l.queue.full(c, l.opts.QueueSize) {
		l.drop(c)
		return
	}
	var p *pending
	if c == classDecision {
		p = l.track(&e)
	}
	l.queue.add(queued{c: c, t: max(e.Time.UnixNano(), 0), rec: encode(nil, &e), p: p})
	l.stats.Recorded++
}

// drop counts an event of class c dropped; mu held.
func (l *Log) drop(c class) {
	l.stats.Dropped++
	if c == classAction {
		l.stats.ActionsDropped++
	}
}

// window is the coalescing interval of t.
func (l *Log) window(t time.Time) int64 { return max(t.UnixNano(), 0) / int64(l.opts.Coalesce) }

// keyOf is e's coalescing key.
func keyOf(e *Event) coalesceKey { return coalesceKey{clip(e.Key), clip(e.Limit), e.Action} }

// coalesce adds decision e to its open record of the interval, if any; mu held.
func (l *Log) coalesce(e *Event) bool {
	p := l.open[keyOf(e)]
	if p == nil || p.window != l.window(e.Time) {
		return false
	}
	if p.count < maxCount {
		p.count++
	}
	p.last = max(p.last, e.Time.UnixNano())
	p.rate = max(p.rate, e.Rate)
	if p.key != nil {
		l.markDirty(p)
	}
	return true
}

// track opens decision e for coalescing and returns its totals (nil:
// QueueSize already open); mu held.
func (l *Log) track(e *Event) *pending {
	w := l.window(e.Time)
	if len(l.open) >= l.opts.QueueSize {
		l.expire(w)
		if len(l.open) >= l.opts.QueueSize {
			return nil
		}
	}
	ck := keyOf(e)
	ck.key = strings.Clone(ck.key) // the map outlives the request's buffers
	p := &pending{ck: ck, window: w, count: 1, last: e.Time.UnixNano(), rate: e.Rate}
	l.open[p.ck] = p
	return p
}

// expire closes the records of intervals before w; mu held.
func (l *Log) expire(w int64) {
	if w <= l.swept {
		return // nothing closed since the last sweep
	}
	l.swept = w
	maps.DeleteFunc(l.open, func(_ coalesceKey, p *pending) bool { return p.window < w })
}

// forget closes p's record (never written, or gone); mu held.
func (l *Log) forget(p *pending) {
	if l.open[p.ck] == p {
		delete(l.open, p.ck)
	}
}

// Stats returns the counters now. A nil Log has none.
func (l *Log) Stats() Stats {
	if l == nil {
		return Stats{}
	}
	l.mu.Lock()
	s := l.stats
	s.Pending = len(l.queue.recs)
	l.mu.Unlock()
	l.fmu.Lock()
	s.Stored, s.ActionsStored = l.count[classDecision], l.count[classAction]
	l.fmu.Unlock()
	return s
}

// Close writes the queued events and returns the flush's error.
func (l *Log) Close() error {
	err := l.Tick()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	return err
}

// update is a written record's new totals.
type update struct {
	p    *pending
	was  pending // p when the flush began
	gone bool    // the record was pruned meanwhile
}

// Tick writes the queued events and grown counts and prunes, in one
// transaction (statedb.Flusher); a failed flush requeues what fits. After
// Close, read-only or nil it does nothing. Errors: BoltDB's.
func (l *Log) Tick() error {
	if l == nil || l.readOnly {
		return nil
	}
	l.fmu.Lock()
	defer l.fmu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	batch := l.queue
	l.queue = queue{}
	for _, r := range batch.recs {
		if p := r.p; p != nil {
			patch(r.rec, p.count, p.last, p.rate)
			p.stored = p.count
		}
	}
	updates := make([]update, 0, len(l.dirty))
	for _, p := range l.dirty {
		updates = append(updates, update{p: p, was: *p})
		p.stored, p.dirty = p.count, false
	}
	l.dirty = l.dirty[:0]
	l.expire(l.window(l.opts.Now()))
	l.mu.Unlock()
	keys, more, err := l.write(&batch, updates)
	l.mu.Lock()
	if err != nil {
		l.stats.Failures++
		l.stats.LastError = err.Error()
		// The failed batch first, then what came meanwhile.
		newer := l.queue
		l.queue = batch
		for _, r := range newer.recs {
			if !l.queue.full(r.c, l.opts.QueueSize) {
				l.queue.add(r)
				continue
			}
			l.drop(r.c)
			if r.p != nil {
				l.forget(r.p)
			}
		}
		for _, u := range updates {
			l.markDirty(u.p)
		}
	} else {
		l.stats.Written += uint64(len(batch.recs))
		for i, r := range batch.recs {
			if p := r.p; p != nil {
				p.key = keys[i]
				if p.count > p.stored {
					l.markDirty(p)
				}
			}
		}
		for _, u := range updates {
			if u.gone {
				l.forget(u.p)
			}
		}
	}
	l.mu.Unlock()
	for more && err == nil {
		_, more, err = l.write(&queue{}, nil)
	}
	return err
}

// markDirty queues p's count to be written again; mu held.
func (l *Log) markDirty(p *pending) {
	p.stored = 0
	if !p.dirty {
		p.dirty = true
		l.dirty = append(l.dirty, p)
	}
}

// write stores batch and updates and prunes in one transaction; it
// returns the keys of batch's coalesced records and if more pruning is due.
func (l *Log) write(batch *queue, updates []update) (keys [][]byte, more bool, err error) {
	now := l.opts.Now()
	if len(batch.recs) == 0 && len(updates) == 0 && !l.pruneDue(now) {
		return nil, false, nil
	}
	keys = make([][]byte, len(batch.recs))
	n := l.count
	var pruned [numClasses]int
	err = statedb.Update(l.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		lb, mb := tx.Bucket(bucketLog), tx.Bucket(bucketMeta)
		if lb == nil || mb == nil {
			return fmt.Errorf("events: buckets %s, %s missing", bucketLog, bucketMeta)
		}
		lb.FillPercent = 0.95          // keys mostly come in time order
		for i, r := range batch.recs { // BoltDB keeps each value until the commit
			seq, err := lb.NextSequence()
			if err != nil {
				return fmt.Errorf("events: %w", err)
			}
			key, rec := recordKey(r.c, time.Unix(0, r.t), seq), r.rec
			seal(key, rec)
			if err := t.Append(lb, logPath, key, rec); err != nil {
				return fmt.Errorf("events: %w", err)
			}
			if r.p != nil {
				keys[i] = key
			}
		}
		for i := range updates {
			u := &updates[i]
			v := lb.Get(u.was.key)
			if v == nil {
				u.gone = true
				continue
			}
			if _, err := recordBody(u.was.key, v); err != nil {
				return err
			}
			rec := bytes.Clone(v)
			patch(rec, u.was.count, u.was.last, u.was.rate)
			seal(u.was.key, rec)
			if err := lb.Put(u.was.key, rec); err != nil {
				return fmt.Errorf("events: %w", err)
			}
		}
		for c := range class(numClasses) {
			n[c] += batch.n[c]
			old, m := l.beyond(lb, c, now, n[c], pruneBatch)
			for _, k := range old {
				if err := lb.Delete(k); err != nil {
					return fmt.Errorf("events: %w", err)
				}
			}
			t.Added(logPath, -len(old))
			n[c] -= len(old)
			pruned[c], more = len(old), more || m
		}
		return putCount(t, mb, n)
	})
	if err != nil {
		return nil, false, err
	}
	l.count = n
	l.mu.Lock()
	l.stats.Pruned += uint64(pruned[classDecision])
	l.stats.ActionsPruned += uint64(pruned[classAction])
	l.mu.Unlock()
	return keys, more, nil
}

// pruneDue reports whether records are beyond the bounds; fmu held.
func (l *Log) pruneDue(now time.Time) (due bool) {
	l.db.View(func(tx *bolt.Tx) error {
		for c := range class(numClasses) {
			if lb := tx.Bucket(bucketLog); lb != nil && !due {
				keys, _ := l.beyond(lb, c, now, l.count[c], 1)
				due = len(keys) > 0
			}
		}
		return nil
	})
	return due
}

// beyond returns up to limit keys of the records of class c, of which n
// are stored, beyond c's bounds, oldest first, and whether there are more.
func (l *Log) beyond(lb *bolt.Bucket, c class, now time.Time, n, limit int) (keys [][]byte, more bool) {
	maxAge, maxN := l.opts.bounds(c)
	cutoff := string(timeKey(c, now.Add(-maxAge)))
	cur := lb.Cursor()
	for k, _ := cur.Seek([]byte{byte(c)}); k != nil && k[0] == byte(c); k, _ = cur.Next() {
		if len(keys) >= n-maxN && string(k) >= cutoff {
			break
		}
		if len(keys) == limit {
			return keys, true
		}
		keys = append(keys, bytes.Clone(k))
	}
	return keys, false
}
