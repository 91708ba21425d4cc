package statedb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// Format describes the records of one top-level bucket for Scan, Check,
// Salvage and SetAside; each store declares its own (ratestore.Formats,
// quarantine.Formats).
type Format struct {
	// Bucket is the top-level bucket's name. With Nested, the records
	// are the values of its nested buckets (one per limit), and the
	// values at its top are its own bookkeeping, not checked.
	Bucket string
	Nested bool
	// Check returns, for the transaction tx, the check of one record:
	// k and v in the bucket at path (Bucket, then the nested bucket's
	// name). It returns the keys the record holds (as far as can be
	// told when it is damaged) and an error for a record that cannot be
	// read. Check is nil for a bucket whose records are never checked.
	Check func(tx *bolt.Tx) func(path []string, k, v []byte) (keys int, err error)
	// SetAside names the top-level bucket that SetAside and Salvage move
	// an unreadable record into, kept byte for byte (a quarantine entry,
	// which is never dropped); empty: the record is deleted by
	// SetAside and not copied by Salvage.
	SetAside string
}

// Lost is a record Scan found unreadable.
type Lost struct {
	Path  []string // its bucket: the top-level bucket, then nested ones
	Key   []byte
	Bytes int   // its length
	Keys  int   // the keys it held, as far as can be told
	Err   error // why it cannot be read
}

func (l Lost) String() string {
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

// Scan checks every record of the buckets formats describe in db and
// returns those that cannot be read, and each bucket's counts. A panic or
// fault of BoltDB while reading is returned as an error (see Open for the
// damage it guards against first).
func Scan(db *bolt.DB, formats []Format) (lost []Lost, usage []Usage, err error) {
	err = recovered(func() error {
		return db.View(func(tx *bolt.Tx) error {
			for _, f := range formats {
				u := Usage{Bucket: f.Bucket}
				b := tx.Bucket([]byte(f.Bucket))
				if b == nil || f.Check == nil {
					usage = append(usage, u)
					continue
				}
				check := f.Check(tx)
				visit := func(path []string, b *bolt.Bucket) error {
					return b.ForEach(func(k, v []byte) error {
						if v == nil {
							return nil
						}
						n, err := check(path, k, v)
						u.Records++
						u.Bytes += len(v)
						u.Keys += n
						if err != nil {
							u.Lost++
							lost = append(lost, Lost{Path: path, Key: bytes.Clone(k), Bytes: len(v), Keys: n, Err: err})
						}
						return nil
					})
				}
				if !f.Nested {
					if err := visit([]string{f.Bucket}, b); err != nil {
						return err
					}
				} else if err := b.ForEachBucket(func(name []byte) error {
					return visit([]string{f.Bucket, string(name)}, b.Bucket(name))
				}); err != nil {
					return err
				}
				usage = append(usage, u)
			}
			return nil
		})
	})
	return lost, usage, err
}

// LostKeys returns the keys the records held, as far as can be told.
func LostKeys(lost []Lost) int {
	n := 0
	for _, l := range lost {
		n += l.Keys
	}
	return n
}

// ErrRecordsLost is wrapped, beside ErrDamaged, by the error of
// RecordsLost.
var ErrRecordsLost = errors.New("records of the state file cannot be read")

// maxListed is how many unreadable records an error lists.
const maxListed = 20

// RecordsLost returns the error that stops the daemon on a state file at
// path with unreadable records: it names the file, the records and the
// keys they held, and the two ways out (state check --salvage, serve
// --accept-state-loss). It wraps ErrDamaged and ErrRecordsLost.
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

// SetAside removes the records lost (found by Scan with formats) from
// db, in one transaction: each is moved into its format's SetAside
// bucket, kept byte for byte under the same key, or deleted. It is the
// operator's decision to go on without them (serve --accept-state-loss).
func SetAside(db *bolt.DB, formats []Format, lost []Lost) error {
	aside := map[string]string{}
	for _, f := range formats {
		aside[f.Bucket] = f.SetAside
	}
	return recovered(func() error {
		return db.Update(func(tx *bolt.Tx) error {
			for _, l := range lost {
				b := tx.Bucket([]byte(l.Path[0]))
				for _, p := range l.Path[1:] {
					if b != nil {
						b = b.Bucket([]byte(p))
					}
				}
				if b == nil {
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
					if err := ab.Put(bytes.Clone(l.Key), bytes.Clone(v)); err != nil {
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

// report writes usage and lost to w for Check.
func report(w io.Writer, usage []Usage, lost []Lost) {
	for _, u := range usage {
		fmt.Fprintf(w, "records %s: %d records, %d bytes, %d keys", u.Bucket, u.Records, u.Bytes, u.Keys)
		if u.Lost > 0 {
			fmt.Fprintf(w, ", %d UNREADABLE", u.Lost)
		}
		fmt.Fprintln(w)
	}
	for _, l := range lost {
		fmt.Fprintf(w, "UNREADABLE record %s\n", l)
	}
}
