package quarantine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// update runs fn on entry id in a write transaction; errUnchanged stores nothing.
func (s *Store) update(op, id string, fn func(b buckets, e *Entry) error) error {
	return s.write(op, func(b buckets) error {
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
}

// needPending: ErrState unless e is pending or (orClaimed) thawed and claimed.
func needPending(op string, e *Entry, orClaimed bool) error {
	if !e.State.Pending() && !(orClaimed && e.State == Thawed && e.Claim != "") {
		return fmt.Errorf("%w: cannot %s %s: it is %s", ErrState, op, e.ID, e.State)
	}
	return nil
}

// MarkThawed records released entry id as Thawed to and as, its message
// kept until SweepThawed. Errors: ErrNotFound, ErrState, bbolt's.
func (s *Store) MarkThawed(id, to, as string) error {
	return s.end("thaw", id, Thawed, func(e *Entry) { e.ThawedTo, e.ThawedAs, e.Error = to, as, "" })
}

// Delete marks pending entry id Deleted, dropping its claim and message.
// Errors: ErrNotFound, ErrState, bbolt's.
func (s *Store) Delete(id string) error { return s.end("delete", id, Deleted, func(*Entry) {}) }

func (s *Store) end(op, id string, state State, set func(*Entry)) error {
	return s.update(op, id, func(b buckets, e *Entry) error {
		if err := needPending(op, e, true); err != nil {
			return err
		}
		if state == Thawed {
			e.Attempts++
		} else if _, err := b.dropBody(id); err != nil {
			return err
		}
		set(e)
		e.State, e.Claim, e.ClaimedAt = state, "", time.Time{}
		return nil
	})
}

// RecordThawError records a failed release of entry id, pending or
// claimed again. Errors: ErrNotFound, ErrState, bbolt's.
func (s *Store) RecordThawError(id string, msg string) error {
	return s.update("record thaw error", id, func(_ buckets, e *Entry) error {
		if err := needPending("record a thaw error for", e, true); err != nil {
			return err
		}
		e.Attempts, e.Error = e.Attempts+1, msg
		e.Claim, e.ClaimedAt = "", time.Time{}
		return nil
	})
}

// Claim durably marks entry id as acted on by token, so each action
// happens once, and returns it: a pending entry (another token's claim
// is taken over, of a frozen entry only with force) or, again, a thawed
// one whose message is kept. Errors: ErrNotFound, ErrState, ErrNoContent
// (swept), ErrBusy, ErrInterrupted, bbolt's.
func (s *Store) Claim(id, token string, force, again bool) (Entry, error) {
	var out Entry
	err := s.update("claim", id, func(b buckets, e *Entry) error {
		switch {
		case again && e.State != Thawed:
			return fmt.Errorf("%w: cannot thaw %s again: it is %s", ErrState, id, e.State)
		case again && b.messages.Get([]byte(id)) == nil:
			return fmt.Errorf("%w: %s: its message was swept after keep_thawed", ErrNoContent, id)
		case !again && !e.State.Pending():
			return needPending("claim", e, false)
		case e.State == Frozen && e.Claim != "" && e.Claim != token && !force:
			return fmt.Errorf("%w: %s: an earlier thaw or delete stopped at %s, after it may have re-injected the message",
				ErrInterrupted, id, e.ClaimedAt.Format(time.RFC3339))
		case e.Claim == token:
			return fmt.Errorf("%w: %s (since %s)", ErrBusy, id, e.ClaimedAt.Format(time.RFC3339))
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

// SweepThawed drops the kept message of each unclaimed thawed entry last
// updated at or before cutoff; it returns how many. Errors: bbolt's.
func (s *Store) SweepThawed(cutoff time.Time) (int, error) {
	return s.sweep("sweep thawed", func(b buckets) (ids []string) {
		c := b.messages.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			e, err := b.get(string(k))
			if err == nil && e.State == Thawed && e.Claim == "" && !e.Updated.After(cutoff) {
				ids = append(ids, e.ID) // unreadable entries are kept with their messages
			}
		}
		return ids
	}, func(b buckets, id string) (err error) {
		_, err = b.dropBody(id)
		return err
	})
}

// sweep applies act to the entries scan picks in one write transaction
// and returns how many; with none it writes nothing.
func (s *Store) sweep(op string, scan func(buckets) []string, act func(b buckets, id string) error) (int, error) {
	n := 0
	err := s.write(op, func(b buckets) error {
		ids := scan(b)
		for _, id := range ids {
			if err := act(b, id); err != nil {
				return err
			}
		}
		if n = len(ids); n == 0 {
			return errUnchanged
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Unclaim drops token's claim on id and records note, if any, as Error.
// Errors: ErrNotFound, bbolt's.
func (s *Store) Unclaim(id, token, note string) error {
	return s.update("unclaim", id, func(_ buckets, e *Entry) error {
		if e.Claim == token {
			e.Claim, e.ClaimedAt = "", time.Time{}
		}
		e.Error = cmp.Or(note, e.Error)
		return nil
	})
}

// Note sets pending entry id's Error to msg without counting an attempt.
// Errors: ErrNotFound, ErrState, bbolt's.
func (s *Store) Note(id, msg string) error {
	return s.setText("annotate", id, msg, func(e *Entry) *string { return &e.Error })
}

// remove deletes all of id and returns the bytes freed (ErrCorrupt: unreadable).
func (b buckets) remove(id string) (int64, error) {
	e, err := b.get(id)
	if err != nil {
		return 0, err
	}
	if err := b.index(&e, true); err != nil {
		return 0, err
	}
	n, err := b.dropBody(id)
	if err != nil {
		return 0, err
	}
	return n, b.t.Delete(b.meta, metaPath, []byte(id))
}

// Expire removes thawed and deleted entries unchanged since now-maxAge and
// returns the count and bytes freed. Errors: ErrInvalid, bbolt's.
func (s *Store) Expire(now time.Time, maxAge time.Duration) (int, int64, error) {
	if maxAge <= 0 {
		return 0, 0, fmt.Errorf("%w: non-positive maximum age %v", ErrInvalid, maxAge)
	}
	cutoff := now.Add(-maxAge)
	var freed int64
	n, err := s.sweep("expire", func(b buckets) (ids []string) {
		freed = 0
		// Updated >= Created, so scanning IDs up to the cutoff suffices.
		b.scan(nil, idBound(cutoff, true), false, func(k, v []byte) bool {
			var e struct {
				Updated time.Time `json:"updated"`
				State   State     `json:"state"`
			}
			if decodeRecord(k, v, &e) == nil && !e.Updated.After(cutoff) && !e.State.Pending() {
				ids = append(ids, string(k))
			}
			return true
		})
		return ids
	}, func(b buckets, id string) error {
		m, err := b.remove(id)
		freed += m
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return n, freed, nil
}

// Suspension records that a postmaster stopped automatic release for a
// key ("ratelimitd quarantine suspend KEY").
type Suspension struct {
	Key  string    `json:"key"`
	By   string    `json:"by,omitempty"`
	Time time.Time `json:"time"`
}

// Suspend stops automatic release for key (by says who) or, resume,
// allows it again; it reports whether key was suspended. Errors:
// ErrInvalid (suspending the empty key), bbolt's.
func (s *Store) Suspend(key, by string, resume bool) (was bool, err error) {
	if key == "" && !resume {
		return false, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	v, err := json.Marshal(Suspension{Key: key, By: by, Time: s.now().Round(0)})
	if err != nil {
		return false, err
	}
	err = s.write("suspend", func(b buckets) error {
		switch was = b.susp.Get([]byte(key)) != nil; {
		case !resume:
			return b.t.Put(b.susp, suspendedPath, []byte(key), sealRecord([]byte(key), v))
		case was:
			return b.t.Delete(b.susp, suspendedPath, []byte(key))
		}
		return nil
	})
	return was, err
}

// Suspended returns the suspended keys, unreadable records too. Errors: bbolt's.
func (s *Store) Suspended() (map[string]Suspension, error) {
	return view(s, "suspended", func(tx *bolt.Tx, out *map[string]Suspension) error {
		*out = map[string]Suspension{}
		b := bucketsOf(tx).susp
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var sp Suspension
			if err := decodeRecord(k, v, &sp); err != nil {
				sp = Suspension{Key: string(k), By: "(record unreadable: ratelimitd state check)"}
			}
			(*out)[string(k)] = sp
			return nil
		})
	})
}
