package quarantine

import (
	"bytes"
	"fmt"
	"io"
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
// An entry that cannot be read is skipped (Stats counts and names it).
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
			if decodeRecord(k, v, &e) != nil {
				continue // kept, unreadable: Stats counts it
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
	// Damaged counts the entries that cannot be read (a failed checksum),
	// DamagedIDs names them: kept with their messages, skipped by List
	// and Expire, until the operator salvages the file or accepts their
	// loss (they then go to quarantine/damaged, counted in Aside).
	Damaged    int
	DamagedIDs []string
	Aside      int
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
		if d := tx.Bucket(bucketDamaged); d != nil {
			st.Aside = d.Stats().KeyN
		}
		return b.meta.ForEach(func(k, v []byte) error {
			var e struct {
				State   State     `json:"state"`
				Key     string    `json:"key"`
				Created time.Time `json:"created"`
			}
			if decodeRecord(k, v, &e) != nil {
				st.Damaged++
				st.DamagedIDs = append(st.DamagedIDs, string(k))
				return nil
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
