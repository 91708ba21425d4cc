package quarantine

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// view runs fn in a read transaction; errors are wrapped with op.
func view[T any](s *Store, op string, fn func(tx *bolt.Tx, out *T) error) (T, error) {
	var out T
	if err := s.db.View(func(tx *bolt.Tx) error { return fn(tx, &out) }); err != nil {
		var zero T
		return zero, wrap(op, err)
	}
	return out, nil
}

// Get returns the entry with the given ID (ErrNotFound, ErrCorrupt).
func (s *Store) Get(id string) (Entry, error) {
	return view(s, "get", func(tx *bolt.Tx, e *Entry) (err error) {
		*e, err = bucketsOf(tx).get(id)
		return err
	})
}

// Message returns a copy of frozen entry id's message, checked against
// its SHA-256. Errors: ErrNotFound, ErrNoContent, ErrCorrupt.
func (s *Store) Message(id string) ([]byte, error) {
	return view(s, "message", func(tx *bolt.Tx, msg *[]byte) error {
		b := bucketsOf(tx)
		e, err := b.get(id)
		if err != nil {
			return err
		}
		if *msg, err = b.readMessage(id); err != nil {
			return err
		}
		if *msg == nil {
			return fmt.Errorf("%w: %s is %s", ErrNoContent, id, e.State)
		}
		return checkMessage(&e, *msg)
	})
}

// Filter selects entries for List, newest first: Sender case-insensitively,
// Key, Limit, States (none: pending), Since <= Created < Before; zero: any.
type Filter struct {
	Sender, Key, Limit string
	States             []State
	Since, Before      time.Time
	Max                int
	OldestFirst        bool
}

func (f *Filter) match(e *Entry) bool {
	state := slices.Contains(f.States, e.State) || len(f.States) == 0 && e.State.Pending()
	return state && (f.Sender == "" || strings.EqualFold(f.Sender, e.Sender)) &&
		(f.Key == "" || f.Key == e.Key) && (f.Limit == "" || f.Limit == e.Limit) &&
		(f.Since.IsZero() || !e.Created.Before(f.Since)) && (f.Before.IsZero() || e.Created.Before(f.Before))
}

// idBound returns the smallest (or, hi, largest) ID created in t's ms.
func idBound(t time.Time, hi bool) []byte {
	ms := max(0, min(t.UnixMilli(), 1<<44-1))
	if hi {
		return fmt.Appendf(nil, "%011xfffff", ms)
	}
	return fmt.Appendf(nil, "%011x00000", ms)
}

// List returns the entries f selects, skipping unreadable ones (bbolt errors).
func (s *Store) List(f Filter) ([]Entry, error) {
	return view(s, "list", func(tx *bolt.Tx, out *[]Entry) error {
		var lo, hi []byte
		if !f.Since.IsZero() {
			lo = idBound(f.Since, false)
		}
		if !f.Before.IsZero() {
			hi = idBound(f.Before, true)
		}
		bucketsOf(tx).scan(lo, hi, !f.OldestFirst, func(k, v []byte) bool {
			var e Entry
			if decodeRecord(k, v, &e) == nil && f.match(&e) { // unreadable ones are kept: Stats counts them
				*out = append(*out, e)
			}
			return f.Max <= 0 || len(*out) < f.Max
		})
		return nil
	})
}

// scan calls fn with the entry records with IDs from lo to hi (nil: no
// bound), newest first if newest, until fn returns false.
func (b buckets) scan(lo, hi []byte, newest bool, fn func(k, v []byte) bool) {
	if b.meta == nil {
		return
	}
	c := b.meta.Cursor()
	step := c.Next
	k, v := c.Seek(lo) // nil: the first
	if newest {
		step = c.Prev
		if k, v = c.Seek(hi); k == nil || hi == nil {
			k, v = c.Last()
		} else if bytes.Compare(k, hi) > 0 {
			k, v = c.Prev()
		}
	}
	for ; k != nil && (lo == nil || bytes.Compare(k, lo) >= 0) && (hi == nil || bytes.Compare(k, hi) <= 0); k, v = step() {
		if !fn(k, v) {
			return
		}
	}
}

// Stats summarises the quarantine: entries per state, message bytes,
// pending per key, the oldest pending and the unreadable entries' IDs.
type Stats struct {
	Held, Frozen, Thawed, Deleted int
	Bytes                         int64
	ByKey                         map[string]int
	Oldest                        time.Time
	DamagedIDs                    []string
}

// Stats counts the entries, scanning every record. Errors: bbolt's.
func (s *Store) Stats() (Stats, error) {
	return view(s, "stats", func(tx *bolt.Tx, st *Stats) error {
		st.ByKey = map[string]int{}
		b := bucketsOf(tx)
		if b.meta == nil {
			return nil
		}
		st.Bytes = getBytes(b.info)
		count := map[State]*int{Held: &st.Held, Frozen: &st.Frozen, Thawed: &st.Thawed, Deleted: &st.Deleted}
		return b.meta.ForEach(func(k, v []byte) error {
			var e struct {
				State   State     `json:"state"`
				Key     string    `json:"key"`
				Created time.Time `json:"created"`
			}
			if decodeRecord(k, v, &e) != nil {
				st.DamagedIDs = append(st.DamagedIDs, string(k))
				return nil
			}
			if n := count[e.State]; n != nil {
				*n++
			}
			if e.State.Pending() {
				st.ByKey[e.Key]++
				if st.Oldest.IsZero() || e.Created.Before(st.Oldest) {
					st.Oldest = e.Created
				}
			}
			return nil
		})
	})
}
