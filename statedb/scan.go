package statedb

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Format describes the records of one top-level bucket for Scan, Check,
// Salvage and SetAside.
type Format struct {
	// Bucket is the top-level bucket; Nested: records are in its nested
	// buckets.
	Bucket string
	Nested bool
	// Check returns the keys record v under k holds and an error if it is
	// unreadable. nil: not checked.
	Check func(k, v []byte) (keys int, err error)
	// SetAside names the bucket unreadable records are kept in; empty:
	// deleted.
	SetAside string
}

// Lost is a record Scan found unreadable, or (Key nil) a bucket differing
// from its manifest entry.
type Lost struct {
	Path  []string // its bucket: the top-level bucket, then nested ones
	Key   []byte
	Bytes int   // its length
	Keys  int   // the keys it held (for a bucket: missing), as far as can be told
	Err   error // why it cannot be read
}

func (l Lost) String() string {
	if l.Key == nil {
		return fmt.Sprintf("bucket %s: %v", strings.Join(l.Path, "/"), l.Err)
	}
	key := string(l.Key)
	if len(key) > 80 {
		key = key[:80] + "..."
	}
	keys := "1 key"
	if l.Keys != 1 {
		keys = fmt.Sprintf("up to %d keys", l.Keys)
	}
	return fmt.Sprintf("%s/%q: %d bytes, %s: %v", strings.Join(l.Path, "/"), key, l.Bytes, keys, l.Err)
}

// Usage counts the records of one bucket.
type Usage struct {
	Bucket               string
	Records, Bytes, Keys int
	Lost                 int // records unreadable
}

// Scan checks the formats' records and buckets in db against their checks
// and manifest, returning what is lost and each bucket's counts. A BoltDB
// panic or fault is returned as an error.
func Scan(db *bolt.DB, formats []Format) (lost []Lost, usage []Usage, err error) {
	err = recovered(func() error {
		return db.View(func(tx *bolt.Tx) error {
			m := readManifest(tx)
			lost = append(lost, m.lost...)
			// A value at the root is a bucket with damaged flags.
			tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				if b == nil {
					lost = append(lost, Lost{Path: []string{string(name)}, Err: errTopValue})
				}
				return nil
			})
			tops := map[string]bool{}
			for _, f := range formats {
				tops[f.Bucket] = true
				u, l := scanFormat(tx, f, m)
				usage, lost = append(usage, u), append(lost, l...)
			}
			missing := m.missing(tops)
			slices.SortFunc(missing, func(a, b Lost) int { return slices.Compare(a.Path, b.Path) })
			lost = append(lost, missing...)
			return nil
		})
	})
	return lost, usage, err
}

// scanFormat checks f's records in tx against their checks and m.
func scanFormat(tx *bolt.Tx, f Format, m *manifest) (u Usage, lost []Lost) {
	u.Bucket = f.Bucket
	b := tx.Bucket([]byte(f.Bucket))
	if b == nil {
		return u, nil
	}
	// visit checks b at path and returns its nested buckets.
	visit := func(path []string, b *bolt.Bucket, records bool) (nested [][]byte) {
		var values uint64
		b.ForEach(func(k, v []byte) error {
			if v == nil {
				nested = append(nested, bytes.Clone(k))
				return nil
			}
			values++
			if !records || f.Check == nil {
				return nil
			}
			n, err := f.Check(k, v)
			u.Records++
			u.Bytes += len(v)
			u.Keys += n
			if err != nil {
				u.Lost++
				lost = append(lost, Lost{Path: path, Key: bytes.Clone(k), Bytes: len(v), Keys: n, Err: err})
			}
			return nil
		})
		if l, ok := m.compare(path, b, values); !ok {
			u.Lost++
			lost = append(lost, l)
		}
		return nested
	}
	// A bucket among records is not read (its count finds it missing).
	nested := visit([]string{f.Bucket}, b, !f.Nested)
	if f.Nested {
		for _, name := range nested {
			visit([]string{f.Bucket, string(name)}, b.Bucket(name), true)
		}
	}
	return u, lost
}

// errTopValue is the error of a top-level value.
var errTopValue = errors.New("a value, not a bucket, at the top of the file: a bucket's flags damaged")

// LostKeys returns the keys the records held, as far as can be told.
func LostKeys(lost []Lost) int {
	n := 0
	for _, l := range lost {
		n += l.Keys
	}
	return n
}

// ErrRecordsLost is wrapped by RecordsLost's error.
var ErrRecordsLost = errors.New("records of the state file cannot be read")

// maxListed is how many unreadable records an error lists.
const maxListed = 20

// RecordsLost returns the error for unreadable records at path, naming
// them and the ways out; it wraps ErrDamaged and ErrRecordsLost.
func RecordsLost(path string, lost []Lost) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d records cannot be read (up to %d keys):\n", path, len(lost), LostKeys(lost))
	for i, l := range lost {
		if i == maxListed {
			fmt.Fprintf(&b, "  ... and %d more (ratelimitd state check lists them all)\n", len(lost)-maxListed)
			break
		}
		fmt.Fprintf(&b, "  %s\n", l)
	}
	fmt.Fprintf(&b, "ratelimitd will not start while these are unreadable: their keys would be forgotten. Either\n"+
		"  copy everything readable to a new file, then move it into place (keep the old one):\n"+
		"    ratelimitd state check --config CONFIG --salvage NEW.db\n"+
		"    mv %s %s.damaged; mv NEW.db %s\n"+
		"  or start without them (their keys start afresh; unreadable quarantine entries are kept aside,\n"+
		"  logged at ERROR and counted in ratelimitd_state_keys_lost_total):\n"+
		"    ratelimitd serve --config CONFIG --accept-state-loss", path, path, path)
	return fmt.Errorf("%w: %w: %s", ErrDamaged, ErrRecordsLost, b.String())
}

// SetAside moves the lost records (Scan's) into their format's SetAside
// bucket, or deletes them, in one transaction.
func SetAside(db *bolt.DB, formats []Format, lost []Lost) error {
	aside := map[string]string{}
	for _, f := range formats {
		aside[f.Bucket] = f.SetAside
	}
	return recovered(func() error {
		return Update(db, func(tx *bolt.Tx, t *Tally) error {
			for _, l := range lost {
				if l.Err == errTopValue {
					// Not readable as a bucket: recount its entries.
					c := tx.Cursor()
					if k, v := c.Seek([]byte(l.Path[0])); string(k) == l.Path[0] && v != nil {
						if err := c.Delete(); err != nil {
							return err
						}
					}
					continue
				}
				if l.Path[0] == ManifestBucket {
					if mb := tx.Bucket(manifestName); mb != nil {
						if err := mb.Delete(l.Key); err != nil {
							return err
						}
					}
					continue
				}
				t.Recount(l.Path)
				b := bucketAt(tx, l.Path)
				if b == nil || l.Key == nil {
					continue
				}
				v := b.Get(l.Key)
				if v == nil {
					continue
				}
				if name := aside[l.Path[0]]; name != "" {
					ab, err := tx.CreateBucketIfNotExists([]byte(name))
					if err != nil {
						return err
					}
					if err := t.Put(ab, []string{name}, bytes.Clone(l.Key), bytes.Clone(v)); err != nil {
						return err
					}
				}
				if err := b.Delete(l.Key); err != nil {
					return fmt.Errorf("delete %s: %w", l, err)
				}
			}
			return nil
		})
	})
}
