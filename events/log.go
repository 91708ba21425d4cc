package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// The buckets of the state file the Log owns (see the package comment).
var (
	bucketLog  = []byte("events/log")
	bucketMeta = []byte("events/meta")
	metaCount  = []byte("count")
	metaFormat = []byte("format")
	// Their paths in the manifest (statedb.Tally).
	logPath  = []string{"events/log"}
	metaPath = []string{"events/meta"}
)

// Defaults of Options.
const (
	DefaultMaxAge    = 30 * 24 * time.Hour
	DefaultMaxCount  = 1_000_000
	DefaultQueueSize = 50_000
	// pruneBatch bounds the records one pruning transaction deletes.
	pruneBatch = 50_000
)

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("events: log closed")

// Options configure a Log; zero fields take the defaults above.
type Options struct {
	// MaxAge: records older than this are deleted (default 30 days).
	MaxAge time.Duration
	// MaxCount: beyond this many records the oldest are deleted (default
	// 1,000,000).
	MaxCount int
	// QueueSize bounds the events waiting for a flush (default 50,000,
	// at most 32 MiB encoded); beyond it Record drops and counts.
	QueueSize int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) withDefaults() {
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultMaxAge
	}
	if o.MaxCount <= 0 {
		o.MaxCount = DefaultMaxCount
	}
	if o.QueueSize <= 0 {
		o.QueueSize = DefaultQueueSize
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// Stats are a Log's counters since Open.
type Stats struct {
	// Recorded counts the events Record queued; Dropped those it dropped
	// because the queue was full (or the Log read-only or closed).
	Recorded uint64 `json:"recorded"`
	Dropped  uint64 `json:"dropped"`
	// Written counts the events flushed to the file, Pruned the records
	// deleted by the bounds.
	Written uint64 `json:"written"`
	Pruned  uint64 `json:"pruned"`
	// Pending is the events queued now; Stored the records in the file.
	Pending int `json:"pending"`
	Stored  int `json:"stored"`
	// Failures counts failed flushes; LastError is the last one's error.
	Failures  uint64 `json:"failures"`
	LastError string `json:"last_error,omitempty"`
}

// Log is the event history in a BoltDB file. Create it with Open; see the
// package comment.
type Log struct {
	db       *bolt.DB
	opts     Options
	readOnly bool

	// mu guards queue, spare, closed and the counters of stats but
	// Stored.
	mu     sync.Mutex
	queue  queue
	spare  queue // the previous flush's queue, reused
	closed bool
	stats  Stats

	// fmu serialises flushes and pruning, and guards count.
	fmu   sync.Mutex
	count int
}

// queue holds the events waiting for a flush, encoded at Record: it
// keeps none of the caller's memory.
type queue struct {
	buf  []byte
	recs []queued
}

// queued is one event of a queue: its time (Unix nanoseconds) and its
// record, buf[off:end].
type queued struct {
	t        int64
	off, end int
}

// maxQueueBytes bounds the bytes of encoded events queued (about 100
// bytes each with typical fields, at most 8 KiB).
const maxQueueBytes = 32 << 20

// add appends the encoded event e.
func (q *queue) add(e *Event) {
	off := len(q.buf)
	q.buf = encode(q.buf, e)
	q.recs = append(q.recs, queued{t: max(e.Time.UnixNano(), 0), off: off, end: len(q.buf)})
}

// record returns the i-th record's bytes, capped so that nothing appended
// to buf later overwrites it.
func (q *queue) record(i int) []byte {
	r := q.recs[i]
	return q.buf[r.off:r.end:r.end]
}

// appendQueue appends the first n events of o to q.
func (q *queue) appendQueue(o *queue, n int) {
	for i := range n {
		off := len(q.buf)
		q.buf = append(q.buf, o.record(i)...)
		q.recs = append(q.recs, queued{t: o.recs[i].t, off: off, end: len(q.buf)})
	}
}

// Open returns the Log stored in db, creating its buckets unless db is
// read-only. It fails for a log of another format and on BoltDB errors.
func Open(db *bolt.DB, opts Options) (*Log, error) {
	opts.withDefaults()
	l := &Log{db: db, opts: opts, readOnly: db.IsReadOnly()}
	if l.readOnly {
		err := db.View(func(tx *bolt.Tx) error {
			l.count = storedCount(tx)
			return nil
		})
		return l, err
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
		if v := mb.Get(metaCount); len(v) == 8 {
			l.count = int(binary.BigEndian.Uint64(v))
			return nil
		}
		l.count = lb.Stats().KeyN
		return putCount(t, mb, l.count)
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Formats describes the event log's records for statedb (Scan, Check,
// Salvage, SetAside): each record of events/log is one event.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketLog), Check: func(*bolt.Tx) func([]string, []byte, []byte) (int, error) {
			return func(_ []string, k, v []byte) (int, error) {
				body, err := recordBody(k, v)
				if err == nil {
					_, err = decode(k, body)
				}
				return 1, err
			}
		}},
		{Bucket: string(bucketMeta)},
	}
}

// storedCount reads the record count of the events/meta bucket, or counts
// the records when it is missing.
func storedCount(tx *bolt.Tx) int {
	if mb := tx.Bucket(bucketMeta); mb != nil {
		if v := mb.Get(metaCount); len(v) == 8 {
			return int(binary.BigEndian.Uint64(v))
		}
	}
	if lb := tx.Bucket(bucketLog); lb != nil {
		return lb.Stats().KeyN
	}
	return 0
}

func putCount(t *statedb.Tally, mb *bolt.Bucket, n int) error {
	if err := t.Put(mb, metaPath, metaCount, binary.BigEndian.AppendUint64(nil, uint64(n))); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	return nil
}

// Record queues e for the next flush and returns at once (a zero Time is
// the Log's clock). With the queue full, or l read-only or closed, e is
// dropped and counted. A nil Log does nothing.
func (l *Log) Record(e Event) {
	if l == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = l.opts.Now()
	}
	l.mu.Lock()
	if l.closed || l.readOnly || len(l.queue.recs) >= l.opts.QueueSize || len(l.queue.buf) >= maxQueueBytes {
		l.stats.Dropped++
	} else {
		l.queue.add(&e)
		l.stats.Recorded++
	}
	l.mu.Unlock()
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
	s.Stored = l.count
	l.fmu.Unlock()
	return s
}

// Tick is Flush for statedb.Flusher: nil after Close and on a
// read-only Log.
func (l *Log) Tick() error {
	if err := l.Flush(); !errors.Is(err, ErrClosed) {
		return err
	}
	return nil
}

// Close writes the queued events; Record drops afterwards.
// It returns the last flush's error.
func (l *Log) Close() error {
	if l == nil {
		return nil
	}
	err := l.Flush()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Flush writes the queued events and prunes beyond the bounds in one
// transaction (more past pruneBatch). A failed flush queues its events
// again (as many as fit; the rest dropped and counted) and counts the
// failure. It returns ErrClosed after Close; read-only it does nothing.
func (l *Log) Flush() error {
	if l.readOnly {
		return nil
	}
	l.fmu.Lock()
	defer l.fmu.Unlock()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	batch := l.queue
	l.queue = queue{buf: l.spare.buf[:0], recs: l.spare.recs[:0]}
	l.spare = queue{}
	l.mu.Unlock()
	more, err := l.write(&batch)
	l.mu.Lock()
	if err != nil {
		l.stats.Failures++
		l.stats.LastError = err.Error()
		// The failed batch goes first, then what came meanwhile, as
		// much as the queue holds.
		newer := l.queue
		l.queue = batch
		n := min(len(newer.recs), max(l.opts.QueueSize-len(batch.recs), 0))
		l.queue.appendQueue(&newer, n)
		l.stats.Dropped += uint64(len(newer.recs) - n)
	} else {
		l.stats.Written += uint64(len(batch.recs))
		if cap(batch.buf) <= maxQueueBytes/4 {
			l.spare = queue{buf: batch.buf[:0], recs: batch.recs[:0]}
		}
	}
	l.mu.Unlock()
	for more && err == nil {
		more, err = l.write(&queue{})
	}
	return err
}

// write stores batch and prunes in one transaction (none if there is
// nothing to do), reporting whether more is due for pruning; fmu is held.
func (l *Log) write(batch *queue) (more bool, err error) {
	now := l.opts.Now()
	if len(batch.recs) == 0 && !l.pruneDue(now) {
		return false, nil
	}
	n, pruned := l.count, 0
	err = statedb.Update(l.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		lb, mb := tx.Bucket(bucketLog), tx.Bucket(bucketMeta)
		if lb == nil || mb == nil {
			return fmt.Errorf("events: buckets %s, %s missing", bucketLog, bucketMeta)
		}
		// Keys mostly come in time order, at the end: fill the pages.
		lb.FillPercent = 0.95
		// BoltDB keeps each value until the commit: the batch's
		// buffer is not reused before.
		for i, r := range batch.recs {
			seq, err := lb.NextSequence()
			if err != nil {
				return fmt.Errorf("events: %w", err)
			}
			key, rec := recordKey(time.Unix(0, r.t), seq), batch.record(i)
			seal(key, rec)
			if err := t.Append(lb, logPath, key, rec); err != nil {
				return fmt.Errorf("events: %w", err)
			}
		}
		n += len(batch.recs)
		var err error
		if pruned, more, err = l.pruneTx(lb, now, n); err != nil {
			return err
		}
		t.Added(logPath, -pruned)
		n -= pruned
		return putCount(t, mb, n)
	})
	if err != nil {
		return false, err
	}
	l.count = n
	if pruned > 0 {
		l.mu.Lock()
		l.stats.Pruned += uint64(pruned)
		l.mu.Unlock()
	}
	return more, nil
}

// pruneDue reports whether records are beyond the bounds at now; fmu is
// held.
func (l *Log) pruneDue(now time.Time) bool {
	if l.count > l.opts.MaxCount {
		return true
	}
	cutoff := timeKey(now.Add(-l.opts.MaxAge))
	due := false
	l.db.View(func(tx *bolt.Tx) error {
		if lb := tx.Bucket(bucketLog); lb != nil {
			k, _ := lb.Cursor().First()
			due = k != nil && string(k) < string(cutoff)
		}
		return nil
	})
	return due
}

// pruneTx deletes from lb, oldest first, at most pruneBatch records older
// than MaxAge or beyond MaxCount of the n stored; more: the batch was full.
func (l *Log) pruneTx(lb *bolt.Bucket, now time.Time, n int) (deleted int, more bool, err error) {
	cutoff := string(timeKey(now.Add(-l.opts.MaxAge)))
	over := n - l.opts.MaxCount
	var keys [][]byte
	c := lb.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(keys) >= over && string(k) >= cutoff {
			break
		}
		if len(keys) == pruneBatch {
			more = true
			break
		}
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := lb.Delete(k); err != nil {
			return 0, false, fmt.Errorf("events: %w", err)
		}
	}
	return len(keys), more, nil
}
