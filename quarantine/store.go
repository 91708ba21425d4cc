package quarantine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/statedb"
	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bucket layout. All buckets are top-level buckets of the daemon's BoltDB
// file, so the quarantine can share the file with other stores.
var (
	// bucketMeta maps ID -> JSON-encoded Entry.
	bucketMeta = []byte("quarantine/meta")
	// bucketBody maps ID -> the message bytes of a frozen entry of at
	// most ChunkSize bytes (or any size, frozen before chunking); larger
	// ones are in bucketChunks (body.go). Only frozen entries have a
	// value here.
	bucketBody = []byte("quarantine/body")
	// bucketInstance maps Instance + "\x00" + ID -> "" for entries whose
	// Instance is set (index for UpdateByInstance).
	bucketInstance = []byte("quarantine/index-instance")
	// bucketInfo holds "version" (decimal) and "bytes" (big-endian
	// uint64, the sum of the lengths of all values in bucketBody, kept in
	// the same transactions that change bucketBody).
	bucketInfo = []byte("quarantine/info")

	keyVersion = []byte("version")
	keyBytes   = []byte("bytes")
)

// formatVersion is the version of the layout above: 2 seals entries and
// suspensions (see formats.go); files of format 1 are converted by New.
const (
	formatVersion     = 2
	formatVersionText = "2"
	formatV1          = 1
)

// maxIndexedInstance bounds the instance length put in the index (bbolt
// keys are limited to 32 KiB; Postfix instances are ~20 bytes).
const maxIndexedInstance = 1024

// DefaultLockTimeout is how long Open waits for the database file's lock
// when Options.LockTimeout is zero.
const DefaultLockTimeout = time.Second

// Options configure a Store. The zero value is usable: no size limit, the
// real clock.
type Options struct {
	// MaxSize bounds the total bytes of stored message content (frozen
	// entries). Freeze returns ErrFull instead of exceeding it. Zero means
	// unlimited. Held entries and metadata are not counted.
	MaxSize int64

	// Now returns the current time; nil means time.Now. Tests set it.
	Now func() time.Time

	// LockTimeout (Open only) is how long to wait for the file lock
	// before returning ErrLocked; zero means DefaultLockTimeout.
	LockTimeout time.Duration
	// ReadOnly (Open only) opens the file read-only: reading methods work,
	// the others fail with bbolt's ErrDatabaseReadOnly. A read-only open
	// still waits for the daemon's exclusive lock.
	ReadOnly bool
}

// Store is the quarantine. All its methods are safe for concurrent use;
// write methods are serialised by BoltDB's single writer, and each one is
// one transaction, committed and fsync'd before the method returns.
//
// Stored byte slices never leave a transaction: every value handed out is
// a copy.
type Store struct {
	db      *bolt.DB
	owned   bool // Open opened db; Close closes it
	maxSize int64
	now     func() time.Time
	// chunkBuf is the buffer chunks are read into, used only inside a
	// write transaction (body.go).
	chunkBuf []byte
}

// New returns a Store keeping its buckets in db, creating them if needed
// (unless db is read-only). db stays the caller's: Store.Close does not
// close it.
//
// New returns ErrNoSync if db.NoSync is set (every committed freeze must be
// fsync'd; bbolt's default is NoSync=false), ErrVersion for buckets written
// by an incompatible version, or an error from bbolt.
//
// New also recounts the stored message bytes, repairing the running
// total if it disagrees.
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
		err := db.View(func(tx *bolt.Tx) error {
			_, err := checkVersion(tx.Bucket(bucketInfo))
			return err
		})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	err := statedb.Update(db, func(tx *bolt.Tx, t *statedb.Tally) error {
		for _, name := range [][]byte{bucketMeta, bucketBody, bucketInstance, bucketInfo, bucketSuspended, bucketChunks, bucketChunked} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("quarantine: create bucket %s: %w", name, err)
			}
			t.Ensure([]string{string(name)})
		}
		info := tx.Bucket(bucketInfo)
		found, err := checkVersion(info)
		if err != nil {
			return err
		}
		if !found || string(info.Get(keyVersion)) != formatVersionText {
			if err := sealRecords(tx, t); err != nil {
				return err
			}
			if err := t.Put(info, infoPath, keyVersion, []byte(formatVersionText)); err != nil {
				return err
			}
		}
		var total uint64
		err = tx.Bucket(bucketBody).ForEach(func(_, v []byte) error {
			total += uint64(len(v))
			return nil
		})
		if err != nil {
			return err
		}
		chunked, err := sweepChunks(tx, t)
		if err != nil {
			return err
		}
		total += uint64(chunked)
		if getBytes(info) != int64(total) || info.Get(keyBytes) == nil {
			return putBytes(t, info, int64(total))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// checkVersion returns whether a version is recorded, and ErrVersion if it
// is one this package does not understand. A nil bucket has no version.
func checkVersion(info *bolt.Bucket) (bool, error) {
	if info == nil {
		return false, nil
	}
	v := info.Get(keyVersion)
	if v == nil {
		return false, nil
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || (n != formatVersion && n != formatV1) {
		return true, fmt.Errorf("%w: %q (this build understands %d and %d)", ErrVersion, v, formatV1, formatVersion)
	}
	return true, nil
}

// Open opens (creating it with mode 0600 if needed, unless ReadOnly) the
// BoltDB file at path through statedb.OpenTimeout, which refuses a damaged
// file, and returns a Store on it; Close closes the file. If another
// process (the daemon) holds the file, Open gives up after
// opts.LockTimeout and returns an error wrapping both ErrLocked and bbolt's
// ErrTimeout. The daemon and the CLI open the file with statedb and use
// New.
func Open(path string, opts Options) (*Store, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	db, err := statedb.OpenTimeout(path, opts.ReadOnly, timeout)
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s: %w", ErrLocked, path, berrors.ErrTimeout)
		}
		return nil, fmt.Errorf("quarantine: open %s: %w", path, err)
	}
	s, err := New(db, opts)
	if err != nil {
		db.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// Close closes the database if the Store was made by Open; for a Store
// made by New it does nothing (the caller owns the database).
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.db.Close()
}

// buckets bundles the quarantine's buckets within one transaction. In a
// read-only database that was never written by this package they are nil;
// reading methods treat that as empty.
//
// sealed tells whether the records are sealed (format 2); t, in a write
// transaction, counts the changes for the manifest (every write goes
// through it).
type buckets struct {
	meta, body, inst, info *bolt.Bucket
	sealed                 bool
	t                      *statedb.Tally
	// chunks and chunked hold messages stored in pieces (body.go); nil
	// in a read-only file written before they existed.
	chunks, chunked *bolt.Bucket
}

// The buckets' paths in the manifest.
var (
	metaPath      = []string{string(bucketMeta)}
	bodyPath      = []string{string(bucketBody)}
	instPath      = []string{string(bucketInstance)}
	infoPath      = []string{string(bucketInfo)}
	suspendedPath = []string{string(bucketSuspended)}
	chunksPath    = []string{string(bucketChunks)}
	chunkedPath   = []string{string(bucketChunked)}
)

func bucketsOf(tx *bolt.Tx) buckets {
	return buckets{
		meta:   tx.Bucket(bucketMeta),
		body:   tx.Bucket(bucketBody),
		inst:   tx.Bucket(bucketInstance),
		info:   tx.Bucket(bucketInfo),
		sealed: sealedTx(tx),

		chunks:  tx.Bucket(bucketChunks),
		chunked: tx.Bucket(bucketChunked),
	}
}

func (b buckets) ok() bool { return b.meta != nil && b.body != nil && b.inst != nil && b.info != nil }

// mustBuckets returns the buckets for a writing method, whose writes t
// counts. They always exist in a writable database (New created them).
func mustBuckets(tx *bolt.Tx, t *statedb.Tally) (buckets, error) {
	b := bucketsOf(tx)
	b.t = t
	if !b.ok() {
		return b, fmt.Errorf("quarantine: buckets missing (database not initialised by quarantine.New)")
	}
	return b, nil
}

func getBytes(info *bolt.Bucket) int64 {
	if info == nil {
		return 0
	}
	v := info.Get(keyBytes)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func putBytes(t *statedb.Tally, info *bolt.Bucket, n int64) error {
	if n < 0 {
		n = 0
	}
	return t.Put(info, infoPath, keyBytes, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// get decodes the entry stored under id (ErrNotFound, ErrCorrupt).
func (b buckets) get(id string) (Entry, error) {
	var e Entry
	if b.meta == nil {
		return e, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	v := b.meta.Get([]byte(id))
	if v == nil {
		return e, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err := decodeRecord([]byte(id), v, b.sealed, &e); err != nil {
		return Entry{}, fmt.Errorf("%w (the entry cannot be read; it is kept with its message: ratelimitd state check)", err)
	}
	return e, nil
}

// put stores e under e.ID.
func (b buckets) put(e *Entry) error {
	e.Rate, e.Max = human.Finite(e.Rate), human.Finite(e.Max)
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("quarantine: encode entry %s: %w", e.ID, err)
	}
	return b.t.Put(b.meta, metaPath, []byte(e.ID), sealRecord([]byte(e.ID), data))
}

func instanceKey(instance, id string) []byte {
	k := make([]byte, 0, len(instance)+1+len(id))
	k = append(k, instance...)
	k = append(k, 0)
	return append(k, id...)
}

func indexable(instance string) bool {
	return instance != "" && len(instance) <= maxIndexedInstance && !strings.ContainsRune(instance, 0)
}

func (b buckets) index(e *Entry) error {
	if !indexable(e.Instance) {
		return nil
	}
	return b.t.Put(b.inst, instPath, instanceKey(e.Instance, e.ID), []byte{})
}

func (b buckets) unindex(e *Entry) error {
	if !indexable(e.Instance) {
		return nil
	}
	return b.t.Delete(b.inst, instPath, instanceKey(e.Instance, e.ID))
}

// dropBody removes the message bytes of id, if any, and returns how many
// bytes were freed.
func (b buckets) dropBody(id string) (int64, error) {
	n, err := b.dropChunked(id)
	if err != nil {
		return 0, err
	}
	if v := b.body.Get([]byte(id)); v != nil {
		n += int64(len(v))
		if err := b.t.Delete(b.body, bodyPath, []byte(id)); err != nil {
			return 0, err
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, putBytes(b.t, b.info, getBytes(b.info)-n)
}

// newID returns an unused ID for an entry created at t: the creation time
// in Unix milliseconds (11 hex digits, good until the year 2527) and a
// 5-hex-digit sequence that starts at a random value in the lower half and
// then counts up, so IDs within one millisecond still sort in commit order.
func (b buckets) newID(t time.Time) (string, error) {
	ms := t.UnixMilli()
	ms = max(0, min(ms, 1<<44-1))
	prefix := fmt.Sprintf("%011x", ms)
	last := prefix + "fffff"
	c := b.meta.Cursor()
	k, _ := c.Seek([]byte(last))
	if k == nil {
		k, _ = c.Last()
	} else if string(k) > last {
		k, _ = c.Prev()
	}
	seq := uint64(rand.Uint32() & 0x7ffff)
	if k != nil && strings.HasPrefix(string(k), prefix) {
		prev, err := strconv.ParseUint(string(k[len(prefix):]), 16, 32)
		if err == nil {
			seq = prev + 1
		}
	}
	if seq > 0xfffff {
		return "", fmt.Errorf("quarantine: more than 2^19 entries in the millisecond %d", ms)
	}
	return fmt.Sprintf("%s%05x", prefix, seq), nil
}

// Path returns the database file's path (for messages).
func (s *Store) Path() string { return s.db.Path() }

// sealRecords seals the bare JSON records of a file of format 1 (entries
// and suspensions), in the transaction that marks it format 2. A record
// that is not JSON is left as it is: the next scan reports it, unreadable.
func sealRecords(tx *bolt.Tx, t *statedb.Tally) error {
	for _, bucket := range [][]byte{bucketMeta, bucketSuspended} {
		b := tx.Bucket(bucket)
		var ks, vs [][]byte
		b.ForEach(func(k, v []byte) error {
			if v != nil && json.Valid(v) {
				ks, vs = append(ks, bytes.Clone(k)), append(vs, sealRecord(k, v))
			}
			return nil
		})
		for i := range ks {
			if err := t.Put(b, []string{string(bucket)}, ks[i], vs[i]); err != nil {
				return fmt.Errorf("quarantine: seal %s/%s: %w", bucket, ks[i], err)
			}
		}
	}
	return nil
}
