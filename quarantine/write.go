package quarantine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

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
// message (FreezeFrom with msg's bytes).
func (s *Store) Freeze(e *Entry, msg []byte) (string, error) {
	return s.FreezeFrom(e, bytes.NewReader(msg))
}

// FreezeFrom stores e as a frozen entry together with the complete
// message read from r to its end. The entry is recorded in one BoltDB
// transaction that is committed and fsync'd before FreezeFrom returns:
// when it returns nil error the MTA may be told to discard its copy. A
// message above ChunkSize is stored in chunks committed while it is read
// (readBody: concurrent freezes share one ChunkSize buffer), which count
// only once the entry refers to them. On any error no entry is stored and
// the caller must temp-fail the message.
//
// FreezeFrom sets State (Frozen), ID, Updated, Created (if zero), Action
// (if empty, "freeze"), Size and Hash (SHA-256 of the message), clears
// Error and Attempts, and takes Subject and MessageID from the message's
// header when they are empty; a message whose header cannot be parsed is
// still frozen. On success the completed entry is copied back into *e.
//
// Errors: ErrInvalid (nil e, or a QueueID that ValidQueueID refuses),
// ErrDuplicateQueueID, ErrFull (Options.MaxSize would be exceeded), r's
// error, or a wrapped bbolt error (e.g. a full disk).
func (s *Store) FreezeFrom(e *Entry, r io.Reader) (string, error) {
	if e == nil {
		return "", fmt.Errorf("%w: nil entry", ErrInvalid)
	}
	if err := checkQueueID(e.QueueID); err != nil {
		return "", err
	}
	if e.QueueID != "" {
		// Refused before the message is read, and again when recorded.
		if err := s.db.View(func(tx *bolt.Tx) error { return bucketsOf(tx).uniqueQueueID(e.QueueID, "") }); err != nil {
			return "", err
		}
	}
	st, err := s.readBody(r)
	if err != nil {
		return "", err
	}
	ent := s.prepare(e, Frozen, ActionFreeze)
	ent.Size = st.size
	ent.Hash = hexSum(st.sum)
	if ent.Subject == "" || ent.MessageID == "" {
		subject, id := headerInfo(st.head)
		if ent.Subject == "" {
			ent.Subject = subject
		}
		if ent.MessageID == "" {
			ent.MessageID = id
		}
	}
	err = statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b, err := mustBuckets(tx, t)
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
		if err := b.uniqueQueueID(ent.QueueID, ent.ID); err != nil {
			return err
		}
		if err := b.put(&ent); err != nil {
			return err
		}
		if err := b.putBody(ent.ID, st); err != nil {
			return fmt.Errorf("quarantine: store message: %w", err)
		}
		if err := b.index(&ent); err != nil {
			return err
		}
		return putBytes(t, b.info, total+ent.Size)
	})
	if err != nil {
		if st.chunked {
			s.dropChunks(st.ref)
		}
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
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b, err := mustBuckets(tx, t)
		if err != nil {
			return err
		}
		if ent.ID, err = b.newID(ent.Created); err != nil {
			return err
		}
		if err := b.uniqueQueueID(ent.QueueID, ent.ID); err != nil {
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

// uniqueQueueID returns ErrDuplicateQueueID if a pending entry other
// than self names queueID ("" is never a duplicate). It reads every
// entry: the raw record is searched for the ID first, and only those
// that contain it are decoded.
func (b buckets) uniqueQueueID(queueID, self string) error {
	if queueID == "" {
		return nil
	}
	needle := []byte(queueID)
	return b.meta.ForEach(func(k, v []byte) error {
		if string(k) == self || !bytes.Contains(v, needle) {
			return nil
		}
		o, err := b.get(string(k))
		if err == nil && o.QueueID == queueID && o.State.pending() {
			return fmt.Errorf("%w: queue ID %s already belongs to entry %s", ErrDuplicateQueueID, queueID, o.ID)
		}
		return nil
	})
}

// SetUnverified records why the MTA's queue did not confirm the queue ID
// of pending entry id (Entry.Unverified), or clears it with reason "".
// It does nothing when the entry already says reason. Errors:
// ErrNotFound, ErrState (not pending), bbolt errors.
func (s *Store) SetUnverified(id, reason string) error {
	e, err := s.Get(id)
	if err != nil {
		return err
	}
	if e.Unverified == reason {
		return nil
	}
	return s.update("unverified", id, func(_ buckets, e *Entry) error {
		if err := needPending("flag", e); err != nil {
			return err
		}
		e.Unverified = reason
		return nil
	})
}

// SetQueueID sets the MTA queue ID on the oldest pending entry recorded
// for the Postfix policy instance that has none yet (a hold decided at
// RCPT stage learns the queue ID at END-OF-MESSAGE): one queue ID is
// never given to two entries. It returns the number of entries changed
// (0 or 1); zero is not an error. A queue ID another pending entry has
// already is refused with ErrDuplicateQueueID. An invalid queueID (see ValidQueueID)
// is refused with ErrInvalid.
func (s *Store) SetQueueID(instance, queueID string) (int, error) {
	set := false
	return s.UpdateByInstance(instance, func(e *Entry) bool {
		if set || !e.State.pending() || e.QueueID != "" {
			return false
		}
		e.QueueID, set = queueID, true
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
		if err := b.uniqueQueueID(queueID, id); err != nil {
			return fmt.Errorf("%w: %w", ErrState, err)
		}
		e.QueueID = queueID
		return nil
	})
}

// UpdateByInstance calls fn, inside one write transaction, for every entry
// whose Instance is instance (oldest first), and stores those for which fn
// returns true. fn must not call the Store (it would deadlock). It may
// change the descriptive fields, and the Size of a held entry (what the
// MTA reports); changes to ID, State, Created, Hash and a frozen entry's
// Size are ignored (those follow the stored message and the state
// methods). It returns the number of entries stored. A QueueID that
// ValidQueueID refuses fails the whole call with ErrInvalid, and one that
// another pending entry has (or that fn gives two entries) with
// ErrDuplicateQueueID: nothing is stored.
func (s *Store) UpdateByInstance(instance string, fn func(*Entry) bool) (int, error) {
	if !indexable(instance) {
		return 0, nil
	}
	n := 0
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		n = 0
		b, err := mustBuckets(tx, t)
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
				if err := b.t.Delete(b.inst, instPath, instanceKey(instance, id)); err != nil {
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
			e.ID, e.State, e.Created, e.Hash = orig.ID, orig.State, orig.Created, orig.Hash
			if orig.State != Held {
				e.Size = orig.Size // a frozen entry's size is its stored message's
			}
			e.Claim, e.ClaimedAt = orig.Claim, orig.ClaimedAt
			if err := checkQueueID(e.QueueID); err != nil {
				return err
			}
			if e.QueueID != orig.QueueID {
				if err := b.uniqueQueueID(e.QueueID, e.ID); err != nil {
					return err
				}
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

// HeldDetails are what the MTA's queue tells of a held message, to
// complete its entry (Store.CompleteHeld): its recipients, size (bytes)
// and, from its header, Subject and Message-ID.
type HeldDetails struct {
	Recipients []string
	Size       int64
	Subject    string
	MessageID  string
}

// CompleteHeld adds to the held entry id the recipients of d it lacks
// (compared case-insensitively), sets its Size when d has one, and its
// Subject and MessageID when it has none (both cleaned and bounded like
// Freeze's). Errors: ErrNotFound, ErrState for an entry that is not held,
// the file's.
func (s *Store) CompleteHeld(id string, d HeldDetails) error {
	return s.update("complete", id, func(_ buckets, e *Entry) error {
		if e.State != Held {
			return fmt.Errorf("%w: %s is %s", ErrState, id, e.State)
		}
		for _, r := range d.Recipients {
			if !slices.ContainsFunc(e.Recipients, func(o string) bool { return strings.EqualFold(o, r) }) {
				e.Recipients = append(e.Recipients, r)
			}
		}
		if d.Size > 0 {
			e.Size = d.Size
		}
		if e.Subject == "" {
			e.Subject = truncate(cleanLine(d.Subject), maxSubjectBytes)
		}
		if e.MessageID == "" {
			e.MessageID = truncate(cleanLine(d.MessageID), maxSubjectBytes)
		}
		return nil
	})
}
