package statedb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// The manifest: each bucket the formats describe has an entry written in
// the transaction of its records, which Scan compares:
//
//	statedb/manifest            top-level bucket
//	  path -> record            the top-level name, then NUL and the nested
//	                            name; Seal version 1 of uvarint(values)
//	                            uvarint(sequence)
var manifestName = []byte("statedb/manifest")

// ManifestBucket is the name of the manifest's top-level bucket.
const ManifestBucket = "statedb/manifest"

const manifestVersion = 1

// entry is a bucket's manifest entry.
type entry struct{ count, seq uint64 }

func sealEntry(key []byte, e entry) []byte {
	payload := binary.AppendUvarint(nil, e.count)
	payload = binary.AppendUvarint(payload, e.seq)
	return Seal(nil, key, manifestVersion, payload)
}

func openEntry(key, v []byte) (entry, error) {
	ver, payload, err := Unseal(key, v)
	if err != nil {
		return entry{}, err
	}
	count, n := binary.Uvarint(payload)
	if ver != manifestVersion || n <= 0 {
		return entry{}, fmt.Errorf("%w: manifest entry of version %d", ErrRecord, ver)
	}
	seq, m := binary.Uvarint(payload[n:])
	if m <= 0 || n+m != len(payload) {
		return entry{}, fmt.Errorf("%w: malformed manifest entry", ErrRecord)
	}
	return entry{count: count, seq: seq}, nil
}

// bucketAt returns the bucket at path in tx, or nil.
func bucketAt(tx *bolt.Tx, path []string) *bolt.Bucket {
	b := tx.Bucket([]byte(path[0]))
	for _, p := range path[1:] {
		if b == nil {
			return nil
		}
		b = b.Bucket([]byte(p))
	}
	return b
}

// Tally keeps the manifest entries of the buckets one write transaction
// changes; Save before commit. Not safe for concurrent use.
type Tally struct {
	tx      *bolt.Tx
	changes map[string]*change
	order   []string
}

type change struct {
	path    []string
	delta   int64
	recount bool // count the bucket's values at Save
	ensure  bool // only if it has no entry
}

// Update runs fn in a write transaction of db with a Tally, then saves it.
func Update(db *bolt.DB, fn func(tx *bolt.Tx, t *Tally) error) error {
	return db.Update(func(tx *bolt.Tx) error {
		t := &Tally{tx: tx, changes: map[string]*change{}}
		if err := fn(tx, t); err != nil {
			return err
		}
		return t.Save()
	})
}

func (t *Tally) change(path []string) *change {
	key := strings.Join(path, "\x00")
	c := t.changes[key]
	if c == nil {
		c = &change{path: slices.Clone(path)}
		t.changes[key] = c
		t.order = append(t.order, key)
	}
	return c
}

// Put puts v under k in b, the bucket at path, counting it when k is new.
func (t *Tally) Put(b *bolt.Bucket, path []string, k, v []byte) error {
	if b.Get(k) == nil {
		t.change(path).delta++
	}
	return b.Put(k, v)
}

// Append puts v under a new k (NextSequence) in b, the bucket at path.
func (t *Tally) Append(b *bolt.Bucket, path []string, k, v []byte) error {
	t.change(path).delta++
	return b.Put(k, v)
}

// Delete deletes k from b, the bucket at path.
func (t *Tally) Delete(b *bolt.Bucket, path []string, k []byte) error {
	if b.Get(k) != nil {
		t.change(path).delta--
	}
	return b.Delete(k)
}

// Added counts n values added (negative: deleted) to the bucket at path.
func (t *Tally) Added(path []string, n int) { t.change(path).delta += int64(n) }

// Touch saves the entry of the bucket at path even if no value changed.
func (t *Tally) Touch(path []string) { t.change(path) }

// Recount counts the values of the bucket at path at Save.
func (t *Tally) Recount(path []string) { t.change(path).recount = true }

// Ensure writes an entry for the bucket at path at Save if it has none.
func (t *Tally) Ensure(path []string) {
	if c := t.change(path); !c.recount && c.delta == 0 {
		c.ensure = true
	}
}

// Save writes the changed buckets' entries (value count and sequence).
func (t *Tally) Save() error {
	if len(t.order) == 0 {
		return nil
	}
	mb, err := t.tx.CreateBucketIfNotExists(manifestName)
	if err != nil {
		return fmt.Errorf("statedb: manifest: %w", err)
	}
	for _, key := range t.order {
		c := t.changes[key]
		k := []byte(key)
		b := bucketAt(t.tx, c.path)
		if b == nil {
			if err := mb.Delete(k); err != nil {
				return fmt.Errorf("statedb: manifest: %w", err)
			}
			continue
		}
		old := mb.Get(k)
		e, err := openEntry(k, old)
		if c.ensure && old != nil && err == nil && c.delta == 0 && !c.recount {
			continue
		}
		count := int64(e.count) + c.delta
		if old == nil || err != nil || c.recount || count < 0 {
			count = 0 // the values, not nested buckets
			c := b.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if v != nil {
					count++
				}
			}
		}
		if err := mb.Put(k, sealEntry(k, entry{count: uint64(count), seq: b.Sequence()})); err != nil {
			return fmt.Errorf("statedb: manifest: %w", err)
		}
	}
	t.changes, t.order = map[string]*change{}, nil
	return nil
}

// manifest is the manifest as Scan reads it.
type manifest struct {
	entries map[string]entry
	seen    map[string]bool
	lost    []Lost // its own unreadable entries
}

func readManifest(tx *bolt.Tx) *manifest {
	m := &manifest{entries: map[string]entry{}, seen: map[string]bool{}}
	mb := tx.Bucket(manifestName)
	if mb == nil {
		return m
	}
	mb.ForEach(func(k, v []byte) error {
		e, err := openEntry(k, v)
		if v == nil {
			err = errors.New("a bucket in the manifest")
		}
		if err != nil {
			m.lost = append(m.lost, Lost{Path: []string{ManifestBucket}, Key: bytes.Clone(k), Bytes: len(v), Err: err})
			return nil
		}
		m.entries[string(k)] = e
		return nil
	})
	return m
}

// compare checks bucket b at path (values values) against its entry.
func (m *manifest) compare(path []string, b *bolt.Bucket, values uint64) (Lost, bool) {
	key := strings.Join(path, "\x00")
	e, ok := m.entries[key]
	if !ok {
		return Lost{}, true
	}
	m.seen[key] = true
	switch {
	case values < e.count:
		return Lost{Path: path, Keys: int(e.count - values),
			Err: fmt.Errorf("%d of its %d records missing (the manifest counts %d, the bucket holds %d)",
				e.count-values, e.count, e.count, values)}, false
	case values > e.count:
		return Lost{Path: path, Err: fmt.Errorf("%d records more than the manifest counts (%d, the bucket holds %d): "+
			"a damaged bucket", values-e.count, e.count, values)}, false
	case b.Sequence() != e.seq:
		return Lost{Path: path, Err: fmt.Errorf("its sequence is %d, the manifest says %d: "+
			"new records would overwrite old ones", b.Sequence(), e.seq)}, false
	}
	return Lost{}, true
}

// missing returns a Lost for each entry under tops that Scan did not find.
func (m *manifest) missing(tops map[string]bool) []Lost {
	var lost []Lost
	for key, e := range m.entries {
		path := strings.SplitN(key, "\x00", 2)
		if m.seen[key] || !tops[path[0]] {
			continue
		}
		lost = append(lost, Lost{Path: path, Keys: int(e.count),
			Err: fmt.Errorf("the bucket is missing (the manifest counts %d records in it): its name damaged, or the bucket lost", e.count)})
	}
	return lost
}
