package quarantine

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

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

// Message returns a copy of frozen entry id's message, checked against
// its SHA-256. Errors: ErrNotFound, ErrNoContent, ErrCorrupt.
func (s *Store) Message(id string) ([]byte, error) {
	var msg []byte
	var e Entry
	err := s.db.View(func(tx *bolt.Tx) error {
		b := bucketsOf(tx)
		var err error
		if e, err = b.get(id); err != nil {
			return err
		}
		if msg, err = b.readMessage(id); err != nil {
			return err
		}
		if msg == nil {
			return fmt.Errorf("%w: %s is %s", ErrNoContent, id, e.State)
		}
		return nil
	})
	if err != nil {
		return nil, wrap("message", err)
	}
	if err := checkMessage(&e, msg); err != nil {
		return nil, err
	}
	return msg, nil
}

// Filter selects entries for List (zero: the pending ones, newest first):
// Sender case-insensitively, Key and Limit exactly, States (none: Held
// and Frozen), Since <= Created < Before; zero fields do not bound.
type Filter struct {
	Sender, Key, Limit string
	States             []State
	Since, Before      time.Time
	Max                int
	OldestFirst        bool
}

func (f *Filter) match(e *Entry) bool {
	if len(f.States) == 0 {
		if !e.State.Pending() {
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

// idBound returns the smallest (or, hi, largest) ID created in t's ms.
func idBound(t time.Time, hi bool) []byte {
	ms := max(0, min(t.UnixMilli(), 1<<44-1))
	if hi {
		return fmt.Appendf(nil, "%011xfffff", ms)
	}
	return fmt.Appendf(nil, "%011x00000", ms)
}

// List returns the entries f selects, skipping unreadable ones. Errors:
// bbolt's.
func (s *Store) List(f Filter) ([]Entry, error) {
	var out []Entry
	err := s.db.View(func(tx *bolt.Tx) error {
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
				out = append(out, e)
			}
			return f.Max <= 0 || len(out) < f.Max
		})
		return nil
	})
	if err != nil {
		return nil, wrap("list", err)
	}
	return out, nil
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
	st := Stats{ByKey: map[string]int{}}
	err := s.db.View(func(tx *bolt.Tx) error {
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
	if err != nil {
		return Stats{}, wrap("stats", err)
	}
	return st, nil
}
