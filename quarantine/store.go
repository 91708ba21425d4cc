// Package quarantine stores held mail (a record of a message in the MTA's
// hold queue) and frozen mail (the whole message, thawed by SMTP
// re-injection) in the daemon's BoltDB file: sealed records and chunked
// messages checked against their SHA-256. Writes return once fsync'd. The
// Store is safe for concurrent use; the life cycle is package lifecycle's.
package quarantine

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Top-level buckets of the daemon's BoltDB file.
var (
	bucketMeta      = []byte("quarantine/meta")           // ID -> sealed JSON Entry
	bucketInstance  = []byte("quarantine/index-instance") // Instance NUL ID -> ""
	bucketInfo      = []byte("quarantine/info")           // "version", "bytes" (big-endian uint64)
	bucketDamaged   = []byte("quarantine/damaged")        // unreadable records set aside
	bucketSuspended = []byte("quarantine/suspended")      // rate key -> sealed JSON Suspension

	keyVersion = []byte("version")
	keyBytes   = []byte("bytes")
)

const (
	formatVersion      = "3"  // New refuses any other
	recordVersion      = 1    // statedb.Seal version of entries and suspensions
	maxIndexedInstance = 1024 // bbolt keys are limited to 32 KiB
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// MaxSize bounds the stored message bytes (ErrFull); 0: unlimited.
	MaxSize int64
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Store is the quarantine; each write is one fsync'd transaction.
type Store struct {
	db      *bolt.DB
	maxSize int64
	now     func() time.Time
	// chunkBuf is read into only inside a write transaction (message.go).
	chunkBuf []byte
}

// New returns a Store keeping its buckets in db (read-only: writes
// fail). Errors: ErrNoSync, ErrVersion, ErrInvalid, bbolt's.
func New(db *bolt.DB, opts Options) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil database", ErrInvalid)
	}
	if db.NoSync {
		return nil, ErrNoSync
	}
	if opts.MaxSize < 0 {
		return nil, fmt.Errorf("%w: negative MaxSize", ErrInvalid)
	}
	s := &Store{db: db, maxSize: opts.MaxSize, now: opts.Now}
	if s.now == nil {
		s.now = time.Now
	}
	if db.IsReadOnly() {
		return s, db.View(func(tx *bolt.Tx) error { return checkVersion(tx.Bucket(bucketInfo)) })
	}
	err := statedb.Update(db, func(tx *bolt.Tx, t *statedb.Tally) error {
		if err := checkVersion(tx.Bucket(bucketInfo)); err != nil {
			return err
		}
		for _, name := range [][]byte{bucketMeta, bucketInstance, bucketInfo, bucketSuspended, bucketChunks, bucketMessages} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("quarantine: create bucket %s: %w", name, err)
			}
			t.Ensure([]string{string(name)})
		}
		info := tx.Bucket(bucketInfo)
		if info.Get(keyVersion) == nil {
			if err := t.Put(info, infoPath, keyVersion, []byte(formatVersion)); err != nil {
				return err
			}
		}
		total, err := sweepChunks(tx, t)
		if err != nil {
			return err
		}
		if info.Get(keyBytes) == nil || getBytes(info) != total {
			return putBytes(t, info, total)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// checkVersion returns ErrVersion for a version other than formatVersion.
func checkVersion(info *bolt.Bucket) error {
	if info == nil {
		return nil
	}
	if v := info.Get(keyVersion); v != nil && string(v) != formatVersion {
		return fmt.Errorf("%w: %q (this build reads %s only)", ErrVersion, v, formatVersion)
	}
	return nil
}

// Formats describes the buckets for statedb.
func Formats() []statedb.Format {
	check := func(what string) func(k, v []byte) (int, error) {
		return func(k, v []byte) (int, error) {
			if err := decodeRecord(k, v, &json.RawMessage{}); err != nil {
				return 1, fmt.Errorf("%s: %w", what, err)
			}
			return 1, nil
		}
	}
	return []statedb.Format{
		{Bucket: string(bucketMeta), Check: check("quarantine entry"), SetAside: string(bucketDamaged)},
		{Bucket: string(bucketSuspended), Check: check("suspension"), SetAside: string(bucketDamaged)},
		{Bucket: string(bucketChunks)},
		{Bucket: string(bucketMessages)},
		{Bucket: string(bucketInstance)},
		{Bucket: string(bucketInfo)},
		{Bucket: string(bucketDamaged)},
	}
}

func sealRecord(key, js []byte) []byte {
	return statedb.Seal(make([]byte, 0, len(js)+statedb.RecordOverhead), key, recordVersion, js)
}

// decodeRecord decodes the JSON of record v under key into x. Errors wrap
// ErrCorrupt (and statedb.ErrRecord for a bad checksum).
func decodeRecord(key, v []byte, x any) error {
	ver, js, err := statedb.Unseal(key, v)
	if err == nil && ver != recordVersion {
		err = fmt.Errorf("%w: a record of version %d", statedb.ErrRecord, ver)
	}
	if err == nil {
		err = json.Unmarshal(js, x)
	}
	if err != nil {
		return fmt.Errorf("%w: %q: %w", ErrCorrupt, key, err)
	}
	return nil
}

// buckets are the quarantine's buckets in one transaction; t is a write's tally.
type buckets struct {
	meta, inst, info, chunks, messages, susp *bolt.Bucket
	t                                        *statedb.Tally
}

// The buckets' paths in the manifest.
var (
	metaPath      = []string{string(bucketMeta)}
	instPath      = []string{string(bucketInstance)}
	infoPath      = []string{string(bucketInfo)}
	suspendedPath = []string{string(bucketSuspended)}
	chunksPath    = []string{string(bucketChunks)}
	messagesPath  = []string{string(bucketMessages)}
)

func bucketsOf(tx *bolt.Tx) buckets {
	return buckets{meta: tx.Bucket(bucketMeta), inst: tx.Bucket(bucketInstance), info: tx.Bucket(bucketInfo),
		chunks: tx.Bucket(bucketChunks), messages: tx.Bucket(bucketMessages), susp: tx.Bucket(bucketSuspended)}
}

func (b buckets) ok() bool {
	return b.meta != nil && b.inst != nil && b.info != nil && b.chunks != nil && b.messages != nil && b.susp != nil
}

var errNoBuckets = errors.New("quarantine: buckets missing (database not initialised by quarantine.New)")

func getBytes(info *bolt.Bucket) int64 {
	if info == nil || len(info.Get(keyBytes)) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(info.Get(keyBytes)))
}

func putBytes(t *statedb.Tally, info *bolt.Bucket, n int64) error {
	return t.Put(info, infoPath, keyBytes, binary.BigEndian.AppendUint64(nil, uint64(max(n, 0))))
}

// get decodes the entry stored under id (ErrNotFound, ErrCorrupt).
func (b buckets) get(id string) (Entry, error) {
	var e Entry
	var v []byte
	if b.meta != nil {
		v = b.meta.Get([]byte(id))
	}
	if v == nil {
		return e, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err := decodeRecord([]byte(id), v, &e); err != nil {
		return Entry{}, fmt.Errorf("%w (the entry cannot be read; it is kept with its message: ratelimitd state check)", err)
	}
	return e, nil
}

func (b buckets) put(e *Entry) error {
	e.Rate, e.Max = human.Finite(e.Rate), human.Finite(e.Max)
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("quarantine: encode entry %s: %w", e.ID, err)
	}
	return b.t.Put(b.meta, metaPath, []byte(e.ID), sealRecord([]byte(e.ID), data))
}

func instanceKey(instance, id string) []byte {
	return append(append([]byte(instance), 0), id...)
}

func indexable(instance string) bool {
	return instance != "" && len(instance) <= maxIndexedInstance && !strings.ContainsRune(instance, 0)
}

// index adds e to the instance index, or with del removes it.
func (b buckets) index(e *Entry, del bool) error {
	switch {
	case !indexable(e.Instance):
		return nil
	case del:
		return b.t.Delete(b.inst, instPath, instanceKey(e.Instance, e.ID))
	}
	return b.t.Put(b.inst, instPath, instanceKey(e.Instance, e.ID), []byte{})
}

// newID returns an unused ID for t: Unix ms in 11 hex digits, then a
// 5-digit sequence from a random start below 0x80000.
func (b buckets) newID(t time.Time) (string, error) {
	last := idBound(t, true)
	prefix := string(last[:11])
	var k []byte // the last ID up to last
	b.scan(nil, last, true, func(id, _ []byte) bool { k = id; return false })
	seq := uint64(rand.Uint32() & 0x7ffff)
	if k != nil && strings.HasPrefix(string(k), prefix) {
		if prev, err := strconv.ParseUint(string(k[len(prefix):]), 16, 32); err == nil {
			seq = prev + 1
		}
	}
	if seq > 0xfffff {
		return "", fmt.Errorf("quarantine: more than 2^19 entries in the millisecond %s", t.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%s%05x", prefix, seq), nil
}
