package quarantine

import (
	"bytes"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// update runs fn on the entry id inside a write transaction and stores
// the result.
func (s *Store) update(op, id string, fn func(b buckets, e *Entry) error) error {
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b, err := mustBuckets(tx, t)
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
// entirely, whatever its state. Errors: ErrNotFound, ErrCorrupt (an entry
// that cannot be read is kept, with its message), bbolt errors.
func (s *Store) Purge(id string) error {
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b, err := mustBuckets(tx, t)
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
// freed. An entry that cannot be read is refused (ErrCorrupt): neither it
// nor its message is deleted for want of reading it.
func (b buckets) remove(id string) (int64, error) {
	e, err := b.get(id)
	if err != nil {
		return 0, err
	}
	if err := b.unindex(&e); err != nil {
		return 0, err
	}
	n, err := b.dropBody(id)
	if err != nil {
		return 0, err
	}
	return n, b.t.Delete(b.meta, metaPath, []byte(id))
}

// Expire removes entirely (record, message, index) every thawed or
// deleted entry (an audit record) whose last change (the thaw or delete,
// Updated) was at or before now-maxAge. Held
// and frozen entries are never removed here, however old: a held entry
// names a message that may still be in the MTA's queue and a frozen one
// is the only copy of a message, so their expiry is the caller's (see
// package quarantine/lifecycle: a DSN, postsuper -f, or keeping them). It
// returns the number of entries removed and the message bytes freed, all
// in one transaction. An entry that cannot be read is skipped, never
// removed (Stats counts it in Damaged). Errors: ErrInvalid (maxAge <= 0),
// bbolt errors.
func (s *Store) Expire(now time.Time, maxAge time.Duration) (int, int64, error) {
	if maxAge <= 0 {
		return 0, 0, fmt.Errorf("%w: non-positive maximum age %v", ErrInvalid, maxAge)
	}
	cutoff := now.Add(-maxAge)
	var n int
	var freed int64
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		n, freed = 0, 0
		b, err := mustBuckets(tx, t)
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
			if decodeRecord(k, v, b.sealed, &e) != nil {
				continue // kept, unreadable: Stats counts it
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
