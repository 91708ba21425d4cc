package quarantine

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bucket layout. All buckets are top-level buckets of the daemon's BoltDB
// file, so the quarantine can share the file with other stores.
var (
	// bucketMeta maps ID -> JSON-encoded Entry.
	bucketMeta = []byte("quarantine/meta")
	// bucketBody maps ID -> the message bytes of a frozen entry. Only
	// frozen entries have a value here.
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

// formatVersion is the version of the layout above.
const formatVersion = 1

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
	err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketBody, bucketInstance, bucketInfo, bucketSuspended} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("quarantine: create bucket %s: %w", name, err)
			}
		}
		info := tx.Bucket(bucketInfo)
		found, err := checkVersion(info)
		if err != nil {
			return err
		}
		if !found {
			if err := info.Put(keyVersion, []byte(strconv.Itoa(formatVersion))); err != nil {
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
		if getBytes(info) != int64(total) || info.Get(keyBytes) == nil {
			return putBytes(info, int64(total))
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
	if err != nil || n != formatVersion {
		return true, fmt.Errorf("%w: %q (this build understands %d)", ErrVersion, v, formatVersion)
	}
	return true, nil
}

// Open opens (creating it with mode 0600 if needed, unless ReadOnly) the
// BoltDB file at path and returns a Store on it; Close closes the file.
// It is the offline path for the CLI: if another process (the daemon)
// holds the file, Open gives up after opts.LockTimeout and returns an
// error wrapping both ErrLocked and bbolt's ErrTimeout.
func Open(path string, opts Options) (*Store, error) {
	timeout := opts.LockTimeout
	if timeout <= 0 {
		timeout = DefaultLockTimeout
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: opts.ReadOnly})
	if err != nil {
		if errors.Is(err, berrors.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s: %w", ErrLocked, path, err)
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
type buckets struct {
	meta, body, inst, info *bolt.Bucket
}

func bucketsOf(tx *bolt.Tx) buckets {
	return buckets{
		meta: tx.Bucket(bucketMeta),
		body: tx.Bucket(bucketBody),
		inst: tx.Bucket(bucketInstance),
		info: tx.Bucket(bucketInfo),
	}
}

func (b buckets) ok() bool { return b.meta != nil && b.body != nil && b.inst != nil && b.info != nil }

// mustBuckets returns the buckets for a writing method. They always exist
// in a writable database (New created them).
func mustBuckets(tx *bolt.Tx) (buckets, error) {
	b := bucketsOf(tx)
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

func putBytes(info *bolt.Bucket, n int64) error {
	if n < 0 {
		n = 0
	}
	return info.Put(keyBytes, binary.BigEndian.AppendUint64(nil, uint64(n)))
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
	if err := json.Unmarshal(v, &e); err != nil {
		return e, fmt.Errorf("%w: entry %s: %v", ErrCorrupt, id, err)
	}
	return e, nil
}

// put stores e under e.ID.
func (b buckets) put(e *Entry) error {
	e.Rate, e.Max = finite(e.Rate), finite(e.Max)
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("quarantine: encode entry %s: %w", e.ID, err)
	}
	return b.meta.Put([]byte(e.ID), data)
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
	return b.inst.Put(instanceKey(e.Instance, e.ID), nil)
}

func (b buckets) unindex(e *Entry) error {
	if !indexable(e.Instance) {
		return nil
	}
	return b.inst.Delete(instanceKey(e.Instance, e.ID))
}

// dropBody removes the message bytes of id, if any, and returns how many
// bytes were freed.
func (b buckets) dropBody(id string) (int64, error) {
	v := b.body.Get([]byte(id))
	if v == nil {
		return 0, nil
	}
	n := int64(len(v))
	if err := b.body.Delete([]byte(id)); err != nil {
		return 0, err
	}
	return n, putBytes(b.info, getBytes(b.info)-n)
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

// checkQueueID returns ErrInvalid for a queue ID that is set but not in
// an MTA's syntax (see ValidQueueID): such a value must never be stored,
// since release and delete pass it to postsuper or exim.
func checkQueueID(id string) error {
	if id != "" && !ValidQueueID(id) {
		return fmt.Errorf("%w: %q is not a Postfix or Exim queue ID", ErrInvalid, id)
	}
	return nil
}

// prepare fills in what Hold and Freeze set on a new entry.
func (s *Store) prepare(e *Entry, state State, action string) Entry {
	now := s.now()
	ent := *e
	ent.Recipients = slices.Clone(e.Recipients)
	ent.ID = ""
	ent.State = state
	if ent.Action == "" {
		ent.Action = action
	}
	if ent.Created.IsZero() {
		ent.Created = now
	}
	ent.Created = ent.Created.Round(0)
	ent.Updated = now.Round(0)
	ent.Error = ""
	ent.Attempts = 0
	ent.Claim, ent.ClaimedAt = "", time.Time{}
	return ent
}

// Freeze stores e as a frozen entry together with msg, the complete
// message, in one BoltDB transaction that is committed and fsync'd before
// Freeze returns: when it returns nil error the MTA may be told to
// discard its copy. On any error nothing is stored and the caller must
// temp-fail the message.
//
// Freeze sets State (Frozen), ID, Updated, Created (if zero), Action (if
// empty, "freeze"), Size and Hash (SHA-256 of msg), clears Error and
// Attempts, and takes Subject and MessageID from msg's header when they
// are empty; a message whose header cannot be parsed is still frozen. On
// success the completed entry is copied back into *e.
//
// Errors: ErrInvalid (nil e, or a QueueID that ValidQueueID refuses),
// ErrFull (Options.MaxSize would be exceeded), or a wrapped bbolt error
// (e.g. a message above bbolt's 2 GiB value limit, a full disk).
func (s *Store) Freeze(e *Entry, msg []byte) (string, error) {
	if e == nil {
		return "", fmt.Errorf("%w: nil entry", ErrInvalid)
	}
	if err := checkQueueID(e.QueueID); err != nil {
		return "", err
	}
	ent := s.prepare(e, Frozen, ActionFreeze)
	ent.Size = int64(len(msg))
	sum := sha256.Sum256(msg)
	ent.Hash = hex.EncodeToString(sum[:])
	if ent.Subject == "" || ent.MessageID == "" {
		subject, id := headerInfo(msg)
		if ent.Subject == "" {
			ent.Subject = subject
		}
		if ent.MessageID == "" {
			ent.MessageID = id
		}
	}
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := mustBuckets(tx)
		if err != nil {
			return err
		}
		total := getBytes(b.info)
		if s.maxSize > 0 && total+ent.Size > s.maxSize {
			return fmt.Errorf("%w: %d bytes stored, message of %d bytes, limit %d", ErrFull, total, ent.Size, s.maxSize)
		}
		if ent.ID, err = b.newID(ent.Created); err != nil {
			return err
		}
		if err := b.put(&ent); err != nil {
			return err
		}
		if msg == nil {
			msg = []byte{} // a nil value would read back as "no content"
		}
		if err := b.body.Put([]byte(ent.ID), msg); err != nil {
			return fmt.Errorf("quarantine: store message: %w", err)
		}
		if err := b.index(&ent); err != nil {
			return err
		}
		return putBytes(b.info, total+ent.Size)
	})
	if err != nil {
		return "", wrap("freeze", err)
	}
	if err := s.syncIfNoSync(); err != nil {
		return "", wrap("freeze", err)
	}
	*e = ent
	return ent.ID, nil
}

// syncIfNoSync fsyncs explicitly if someone turned on NoSync after New.
func (s *Store) syncIfNoSync() error {
	if s.db.NoSync {
		return s.db.Sync()
	}
	return nil
}

// wrap adds the operation to errors that are not already ours.
func wrap(op string, err error) error {
	if strings.HasPrefix(err.Error(), "quarantine: ") {
		return err
	}
	return fmt.Errorf("quarantine: %s: %w", op, err)
}

// Hold records e as a held entry: the MTA keeps the message in its hold
// queue and the quarantine keeps only the record. It commits (fsync)
// before returning. It sets State (Held), ID, Updated, Created (if zero)
// and Action (if empty, "hold"), clears Error and Attempts, and copies the
// completed entry back into *e on success.
//
// A hold decided at Postfix's RCPT stage has no queue ID yet; record the
// Instance and add the queue ID later with SetQueueID.
//
// Errors: ErrInvalid (nil e, or a QueueID that ValidQueueID refuses) or
// a wrapped bbolt error.
func (s *Store) Hold(e *Entry) (string, error) {
	if e == nil {
		return "", fmt.Errorf("%w: nil entry", ErrInvalid)
	}
	if err := checkQueueID(e.QueueID); err != nil {
		return "", err
	}
	ent := s.prepare(e, Held, ActionHold)
	ent.Hash = ""
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := mustBuckets(tx)
		if err != nil {
			return err
		}
		if ent.ID, err = b.newID(ent.Created); err != nil {
			return err
		}
		if err := b.put(&ent); err != nil {
			return err
		}
		return b.index(&ent)
	})
	if err != nil {
		return "", wrap("hold", err)
	}
	if err := s.syncIfNoSync(); err != nil {
		return "", wrap("hold", err)
	}
	*e = ent
	return ent.ID, nil
}

// Get returns the entry with the given ID (ErrNotFound, ErrCorrupt).
func (s *Store) Get(id string) (Entry, error) {
	var e Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		e, err = bucketsOf(tx).get(id)
		return err
	})
	if err != nil {
		return Entry{}, wrap("get", err)
	}
	return e, nil
}

// Message returns a copy of the stored message of a frozen entry, after
// checking it against the entry's Hash. Errors: ErrNotFound, ErrNoContent
// (held, thawed or deleted entry), ErrCorrupt (hash mismatch).
func (s *Store) Message(id string) ([]byte, error) {
	var msg []byte
	var e Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		b := bucketsOf(tx)
		var err error
		if e, err = b.get(id); err != nil {
			return err
		}
		var v []byte
		if b.body != nil {
			v = b.body.Get([]byte(id))
		}
		if v == nil {
			return fmt.Errorf("%w: %s is %s", ErrNoContent, id, e.State)
		}
		msg = bytes.Clone(v)
		if msg == nil {
			msg = []byte{}
		}
		return nil
	})
	if err != nil {
		return nil, wrap("message", err)
	}
	sum := sha256.Sum256(msg)
	if hex.EncodeToString(sum[:]) != e.Hash {
		return nil, fmt.Errorf("%w: message %s does not match its SHA-256 %s", ErrCorrupt, id, e.Hash)
	}
	return msg, nil
}

// WriteMessage writes the stored message of a frozen entry to w (for
// re-injection or "quarantine show --raw"). The message is copied out of
// the database and checked against its Hash first, so a slow w never holds
// a read transaction open. Errors: those of Message, and w's.
func (s *Store) WriteMessage(id string, w io.Writer) (int64, error) {
	msg, err := s.Message(id)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(msg)
	return int64(n), err
}

// Preview returns a preview of the stored message of a frozen entry (see
// PreviewMessage). Errors: those of Message; a malformed message yields
// a partial preview and the parse error.
func (s *Store) Preview(id string, maxBytes int) (*Preview, error) {
	msg, err := s.Message(id)
	if err != nil {
		return nil, err
	}
	return PreviewMessage(msg, maxBytes)
}

// Filter selects entries for List. The zero Filter lists every pending
// (held or frozen) entry, newest first.
type Filter struct {
	// Sender matches Entry.Sender case-insensitively; Key and Limit
	// match exactly. Empty matches everything.
	Sender string
	Key    string
	Limit  string
	// States lists the states to include; empty means Held and Frozen.
	States []State
	// Since and Before select Created >= Since and Created < Before;
	// zero values do not restrict.
	Since, Before time.Time
	// Max bounds the number of entries returned; zero means no bound.
	Max int
	// OldestFirst orders by creation time ascending (the order to thaw
	// in); the default is newest first (the order to review in).
	OldestFirst bool
}

func (f *Filter) match(e *Entry) bool {
	if len(f.States) == 0 {
		if !e.State.pending() {
			return false
		}
	} else if !slices.Contains(f.States, e.State) {
		return false
	}
	if f.Sender != "" && !strings.EqualFold(f.Sender, e.Sender) {
		return false
	}
	if f.Key != "" && f.Key != e.Key {
		return false
	}
	if f.Limit != "" && f.Limit != e.Limit {
		return false
	}
	if !f.Since.IsZero() && e.Created.Before(f.Since) {
		return false
	}
	if !f.Before.IsZero() && !e.Created.Before(f.Before) {
		return false
	}
	return true
}

// idBound returns the smallest (hi false) or largest (hi true) ID that
// can belong to an entry created in t's millisecond.
func idBound(t time.Time, hi bool) []byte {
	ms := max(0, min(t.UnixMilli(), 1<<44-1))
	if hi {
		return fmt.Appendf(nil, "%011xfffff", ms)
	}
	return fmt.Appendf(nil, "%011x00000", ms)
}

// List returns the entries f selects, newest first unless f.OldestFirst.
// The time bounds are applied with an index seek (IDs sort by creation
// time); the other criteria by scanning. Errors: ErrCorrupt or a bbolt
// error.
func (s *Store) List(f Filter) ([]Entry, error) {
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		b := bucketsOf(tx)
		if b.meta == nil {
			return nil
		}
		c := b.meta.Cursor()
		var k, v []byte
		var step func() ([]byte, []byte)
		var past func(k []byte) bool
		if f.OldestFirst {
			if f.Since.IsZero() {
				k, v = c.First()
			} else {
				k, v = c.Seek(idBound(f.Since, false))
			}
			step = c.Next
			var end []byte
			if !f.Before.IsZero() {
				end = idBound(f.Before, true)
			}
			past = func(k []byte) bool { return end != nil && bytes.Compare(k, end) > 0 }
		} else {
			if f.Before.IsZero() {
				k, v = c.Last()
			} else {
				end := idBound(f.Before, true)
				k, v = c.Seek(end)
				if k == nil {
					k, v = c.Last()
				} else if bytes.Compare(k, end) > 0 {
					k, v = c.Prev()
				}
			}
			step = c.Prev
			var start []byte
			if !f.Since.IsZero() {
				start = idBound(f.Since, false)
			}
			past = func(k []byte) bool { return start != nil && bytes.Compare(k, start) < 0 }
		}
		for ; k != nil && !past(k); k, v = step() {
			var e Entry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("%w: entry %s: %v", ErrCorrupt, k, err)
			}
			if !f.match(&e) {
				continue
			}
			out = append(out, e)
			if f.Max > 0 && len(out) >= f.Max {
				break
			}
		}
		return nil
	})
	if err != nil {
		return nil, wrap("list", err)
	}
	return out, nil
}

// update runs fn on the entry id inside a write transaction and stores
// the result.
func (s *Store) update(op, id string, fn func(b buckets, e *Entry) error) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := mustBuckets(tx)
		if err != nil {
			return err
		}
		e, err := b.get(id)
		if err != nil {
			return err
		}
		if err := fn(b, &e); err != nil {
			return err
		}
		e.Updated = s.now().Round(0)
		return b.put(&e)
	})
	if err != nil {
		return wrap(op, err)
	}
	return s.syncIfNoSync()
}

func needPending(op string, e *Entry) error {
	if !e.State.pending() {
		return fmt.Errorf("%w: cannot %s %s: it is %s", ErrState, op, e.ID, e.State)
	}
	return nil
}

// MarkThawed records that a held or frozen entry was released (held: the
// MTA released it from its hold queue; frozen: it was re-injected and
// accepted). The entry becomes Thawed, Attempts is incremented, and the
// stored message of a frozen entry is deleted to free space; the record
// stays for audit until Expire or Purge. Call it only after the
// re-injection succeeded: a crash in between leads to a duplicate on the
// next thaw, never to a loss.
//
// Errors: ErrNotFound, ErrState (entry not held or frozen), bbolt errors.
func (s *Store) MarkThawed(id string) error {
	return s.update("thaw", id, func(b buckets, e *Entry) error {
		if err := needPending("thaw", e); err != nil {
			return err
		}
		if _, err := b.dropBody(id); err != nil {
			return err
		}
		e.State = Thawed
		e.Attempts++
		e.Claim, e.ClaimedAt = "", time.Time{}
		return nil
	})
}

// RecordThawError records a failed thaw attempt: the entry stays held or
// frozen (with its message), Attempts is incremented and Error set to msg.
//
// Errors: ErrNotFound, ErrState (entry not held or frozen), bbolt errors.
func (s *Store) RecordThawError(id string, msg string) error {
	return s.update("record thaw error", id, func(_ buckets, e *Entry) error {
		if err := needPending("record a thaw error for", e); err != nil {
			return err
		}
		e.Attempts++
		e.Error = msg
		e.Claim, e.ClaimedAt = "", time.Time{}
		return nil
	})
}

// Delete marks a held or frozen entry Deleted and removes its stored
// message; the record stays for audit until Expire or Purge. (For a held
// entry the caller deletes the MTA's copy, e.g. postsuper -d.)
//
// Errors: ErrNotFound, ErrState (entry not held or frozen), bbolt errors.
func (s *Store) Delete(id string) error {
	return s.update("delete", id, func(b buckets, e *Entry) error {
		if err := needPending("delete", e); err != nil {
			return err
		}
		if _, err := b.dropBody(id); err != nil {
			return err
		}
		e.State = Deleted
		e.Claim, e.ClaimedAt = "", time.Time{}
		return nil
	})
}

// Claim marks a held or frozen entry as being acted on (released,
// re-injected, deleted, expired) by the process that owns token, so that
// each action happens once: claim, act, then MarkThawed, Delete or
// RecordThawError (which drop the claim), or Unclaim after a failure.
// The claim is committed (fsync'd) before Claim returns.
//
// Only one process can open the database at a time (BoltDB's file lock),
// so a claim under another token was left by a process that stopped in
// the middle of an action. Claim takes such a claim over for a held entry
// (repeating postsuper -H or -d is harmless); for a frozen entry the
// re-injection may or may not have been accepted, so Claim refuses with
// ErrInterrupted unless force is set.
//
// Errors: ErrNotFound, ErrState (not held or frozen), ErrBusy (claimed
// under token: an action of this process is in progress), ErrInterrupted,
// bbolt errors. It returns the entry as claimed.
func (s *Store) Claim(id, token string, force bool) (Entry, error) {
	var out Entry
	err := s.update("claim", id, func(_ buckets, e *Entry) error {
		if err := needPending("claim", e); err != nil {
			return err
		}
		switch {
		case e.Claim == "":
		case e.Claim == token:
			return fmt.Errorf("%w: %s (since %s)", ErrBusy, id, e.ClaimedAt.Format(time.RFC3339))
		case e.State == Frozen && !force:
			return fmt.Errorf("%w: %s: an earlier thaw or delete stopped at %s, after it may have re-injected the message",
				ErrInterrupted, id, e.ClaimedAt.Format(time.RFC3339))
		}
		e.Claim, e.ClaimedAt = token, s.now().Round(0)
		out = *e
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	return out, nil
}

// Unclaim drops token's claim on id (after an action failed without
// changing anything), recording note in Error when it is not empty. It
// is not an error if the entry is not claimed by token.
// Errors: ErrNotFound, bbolt errors.
func (s *Store) Unclaim(id, token, note string) error {
	return s.update("unclaim", id, func(_ buckets, e *Entry) error {
		if e.Claim == token {
			e.Claim, e.ClaimedAt = "", time.Time{}
		}
		if note != "" {
			e.Error = note
		}
		return nil
	})
}

// Note records msg as the Error of a pending entry without counting an
// attempt (e.g. "kept past max_age: no queue ID recorded"); it does
// nothing if Error is already msg. Errors: ErrNotFound, ErrState, bbolt
// errors.
func (s *Store) Note(id, msg string) error {
	e, err := s.Get(id)
	if err != nil {
		return err
	}
	if e.Error == msg {
		return nil
	}
	return s.update("note", id, func(_ buckets, e *Entry) error {
		if err := needPending("annotate", e); err != nil {
			return err
		}
		e.Error = msg
		return nil
	})
}

// Purge removes the entry, its stored message and its index entries
// entirely, whatever its state. Errors: ErrNotFound, bbolt errors.
func (s *Store) Purge(id string) error {
	err := s.db.Update(func(tx *bolt.Tx) error {
		b, err := mustBuckets(tx)
		if err != nil {
			return err
		}
		_, err = b.remove(id)
		return err
	})
	if err != nil {
		return wrap("purge", err)
	}
	return s.syncIfNoSync()
}

// remove deletes everything stored for id and returns the message bytes
// freed.
func (b buckets) remove(id string) (int64, error) {
	e, err := b.get(id)
	if err != nil && !errors.Is(err, ErrCorrupt) {
		return 0, err
	}
	if err == nil {
		if err := b.unindex(&e); err != nil {
			return 0, err
		}
	}
	n, err := b.dropBody(id)
	if err != nil {
		return 0, err
	}
	return n, b.meta.Delete([]byte(id))
}

// SetQueueID sets the MTA queue ID on the pending entries recorded for the
// Postfix policy instance that have none yet (a hold decided at RCPT stage
// learns the queue ID at END-OF-MESSAGE). It returns the number of entries
// changed; zero is not an error. An invalid queueID (see ValidQueueID)
// is refused with ErrInvalid.
func (s *Store) SetQueueID(instance, queueID string) (int, error) {
	return s.UpdateByInstance(instance, func(e *Entry) bool {
		if !e.State.pending() || e.QueueID != "" {
			return false
		}
		e.QueueID = queueID
		return true
	})
}

// LinkQueueID sets the queue ID of the held entry id, which has none
// (a message held at its first RCPT, before Postfix had a queue file). It
// refuses an invalid queueID (ErrInvalid), an entry that is not held or
// already has a queue ID (ErrState), and a queue ID another pending entry
// already names (ErrState): one queued message is never two entries.
func (s *Store) LinkQueueID(id, queueID string) error {
	if !ValidQueueID(queueID) {
		return fmt.Errorf("%w: queue ID %q", ErrInvalid, CleanLine(queueID))
	}
	return s.update("link", id, func(b buckets, e *Entry) error {
		if e.State != Held || e.QueueID != "" {
			return fmt.Errorf("%w: %s is %s with queue ID %q", ErrState, id, e.State, e.QueueID)
		}
		err := b.meta.ForEach(func(_, v []byte) error {
			var o Entry
			if json.Unmarshal(v, &o) == nil && o.QueueID == queueID && o.State.pending() {
				return fmt.Errorf("%w: queue ID %s already belongs to entry %s", ErrState, queueID, o.ID)
			}
			return nil
		})
		if err != nil {
			return err
		}
		e.QueueID = queueID
		return nil
	})
}

// UpdateByInstance calls fn, inside one write transaction, for every entry
// whose Instance is instance (oldest first), and stores those for which fn
// returns true. fn must not call the Store (it would deadlock). It may
// change the descriptive fields; changes to ID, State, Created, Size and
// Hash are ignored (those follow the stored message and the state
// methods). It returns the number of entries stored. A QueueID that
// ValidQueueID refuses fails the whole call with ErrInvalid (nothing is
// stored).
func (s *Store) UpdateByInstance(instance string, fn func(*Entry) bool) (int, error) {
	if !indexable(instance) {
		return 0, nil
	}
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		n = 0
		b, err := mustBuckets(tx)
		if err != nil {
			return err
		}
		prefix := instanceKey(instance, "")
		var ids []string
		c := b.inst.Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			ids = append(ids, string(k[len(prefix):]))
		}
		for _, id := range ids {
			e, err := b.get(id)
			if errors.Is(err, ErrNotFound) {
				// Stale index entry: repair.
				if err := b.inst.Delete(instanceKey(instance, id)); err != nil {
					return err
				}
				continue
			}
			if err != nil {
				return err
			}
			orig := e
			orig.Recipients = slices.Clone(e.Recipients)
			if !fn(&e) {
				continue
			}
			e.ID, e.State, e.Created, e.Size, e.Hash = orig.ID, orig.State, orig.Created, orig.Size, orig.Hash
			e.Claim, e.ClaimedAt = orig.Claim, orig.ClaimedAt
			if err := checkQueueID(e.QueueID); err != nil {
				return err
			}
			e.Updated = s.now().Round(0)
			if e.Instance != orig.Instance {
				if err := b.unindex(&orig); err != nil {
					return err
				}
				if err := b.index(&e); err != nil {
					return err
				}
			}
			if err := b.put(&e); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, wrap("update by instance", err)
	}
	if n > 0 {
		if err := s.syncIfNoSync(); err != nil {
			return 0, wrap("update by instance", err)
		}
	}
	return n, nil
}

// Expire removes entirely (record, message, index) every thawed or
// deleted entry (an audit record) whose last change (the thaw or delete,
// Updated) was at or before now-maxAge. Held
// and frozen entries are never removed here, however old: a held entry
// names a message that may still be in the MTA's queue and a frozen one
// is the only copy of a message, so their expiry is the caller's (see
// package quarantine/lifecycle: a DSN, postsuper -f, or keeping them). It
// returns the number of entries removed and the message bytes freed, all
// in one transaction. Errors: ErrInvalid (maxAge <= 0), bbolt errors.
func (s *Store) Expire(now time.Time, maxAge time.Duration) (int, int64, error) {
	if maxAge <= 0 {
		return 0, 0, fmt.Errorf("%w: non-positive maximum age %v", ErrInvalid, maxAge)
	}
	cutoff := now.Add(-maxAge)
	var n int
	var freed int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		n, freed = 0, 0
		b, err := mustBuckets(tx)
		if err != nil {
			return err
		}
		end := idBound(cutoff, true)
		var ids []string
		c := b.meta.Cursor()
		for k, v := c.First(); k != nil && bytes.Compare(k, end) <= 0; k, v = c.Next() {
			var e struct {
				Updated time.Time `json:"updated"`
				State   State     `json:"state"`
			}
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("%w: entry %s: %v", ErrCorrupt, k, err)
			}
			// Updated >= Created, so scanning by creation time finds
			// every record last changed before the cutoff.
			if !e.Updated.After(cutoff) && !e.State.pending() {
				ids = append(ids, string(k))
			}
		}
		for _, id := range ids {
			m, err := b.remove(id)
			if err != nil {
				return err
			}
			n++
			freed += m
		}
		return nil
	})
	if err != nil {
		return 0, 0, wrap("expire", err)
	}
	if n > 0 {
		if err := s.syncIfNoSync(); err != nil {
			return 0, 0, wrap("expire", err)
		}
	}
	return n, freed, nil
}

// Stats summarises the quarantine.
type Stats struct {
	// Entries in each state.
	Held, Frozen, Thawed, Deleted int
	// Bytes is the total size of the stored messages (what MaxSize
	// bounds).
	Bytes int64
	// ByKey counts pending (held and frozen) entries per rate key, for
	// alerts such as "alice has 120 frozen messages". Its size is bounded
	// by the number of entries.
	ByKey map[string]int
	// Oldest is the creation time of the oldest pending entry (zero if
	// there is none).
	Oldest time.Time
}

// Stats counts the entries (a scan of all records). Errors: ErrCorrupt,
// bbolt errors.
func (s *Store) Stats() (Stats, error) {
	st := Stats{ByKey: map[string]int{}}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := bucketsOf(tx)
		if b.meta == nil {
			return nil
		}
		st.Bytes = getBytes(b.info)
		return b.meta.ForEach(func(k, v []byte) error {
			var e struct {
				State   State     `json:"state"`
				Key     string    `json:"key"`
				Created time.Time `json:"created"`
			}
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("%w: entry %s: %v", ErrCorrupt, k, err)
			}
			switch e.State {
			case Held:
				st.Held++
			case Frozen:
				st.Frozen++
			case Thawed:
				st.Thawed++
			case Deleted:
				st.Deleted++
			}
			if e.State.pending() {
				st.ByKey[e.Key]++
				if st.Oldest.IsZero() || e.Created.Before(st.Oldest) {
					st.Oldest = e.Created
				}
			}
			return nil
		})
	})
	if err != nil {
		return Stats{}, wrap("stats", err)
	}
	return st, nil
}

// Path returns the database file's path (for messages).
func (s *Store) Path() string { return s.db.Path() }
