package quarantine

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// write runs fn on the buckets in one write transaction and returns once
// it is durable; fn's errUnchanged rolls back and returns nil.
func (s *Store) write(op string, fn func(b buckets) error) error {
	err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		b := bucketsOf(tx)
		if b.t = t; !b.ok() {
			return errNoBuckets
		}
		return fn(b)
	})
	if err == nil && s.db.NoSync { // set after New
		err = s.db.Sync()
	}
	if err != nil && !errors.Is(err, errUnchanged) {
		return wrap(op, err)
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

// prepare returns a copy of e as a new entry in state (ErrInvalid).
func (s *Store) prepare(e *Entry, state State) (Entry, error) {
	if e == nil {
		return Entry{}, fmt.Errorf("%w: nil entry", ErrInvalid)
	}
	if e.QueueID != "" && !ValidQueueID(e.QueueID) {
		return Entry{}, fmt.Errorf("%w: %q is not a Postfix or Exim queue ID", ErrInvalid, termsafe.Line(e.QueueID))
	}
	now := s.now()
	ent := *e
	ent.Recipients = slices.Clone(e.Recipients)
	ent.ID, ent.State, ent.Error, ent.Attempts, ent.Hash = "", state, "", 0, ""
	ent.Claim, ent.ClaimedAt = "", time.Time{}
	ent.Action = cmp.Or(ent.Action, map[State]string{Held: "hold", Frozen: "freeze"}[state])
	if ent.Created.IsZero() {
		ent.Created = now
	}
	ent.Created, ent.Updated = ent.Created.Round(0), now.Round(0)
	return ent, nil
}

// Recorded says what RecordHold or RecordFreeze did: ID is the
// entry recorded or added to (""), Added that it was a held entry of the
// same Instance, RefusedQueueID a queue ID another entry has, left out.
type Recorded struct {
	ID             string
	Added          bool
	RefusedQueueID string
}

// RecordHold records e as held: with a queue ID, a held entry of
// e.Instance with it, else without one, takes e's queue ID, size and
// recipients (Recorded.Added); else, unless addOnly (then Recorded.ID is
// ""), a new entry is made and copied into *e. Errors: ErrInvalid, bbolt's.
func (s *Store) RecordHold(e *Entry, addOnly bool) (Recorded, error) {
	ent, err := s.prepare(e, Held)
	if err != nil {
		return Recorded{}, err
	}
	var r Recorded
	err = s.write("hold", func(b buckets) (err error) {
		if r, err = b.addToHeld(&ent, s.now().Round(0)); err != nil || r.ID != "" || addOnly {
			return err
		}
		r.RefusedQueueID, err = b.insert(&ent)
		r.ID = ent.ID
		return err
	})
	if err != nil {
		return Recorded{}, err
	}
	if !r.Added && r.ID != "" {
		*e = ent
	}
	return r, nil
}

// addToHeld adds e to the oldest held entry of e.Instance with its queue
// ID, else without one.
func (b buckets) addToHeld(e *Entry, now time.Time) (Recorded, error) {
	if e.QueueID == "" || !indexable(e.Instance) {
		return Recorded{}, nil
	}
	var same, unlinked *Entry
	prefix := instanceKey(e.Instance, "")
	c := b.inst.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		o, err := b.get(string(k[len(prefix):]))
		if err != nil || o.State != Held {
			continue
		}
		switch {
		case same == nil && o.QueueID == e.QueueID:
			same = &o
		case unlinked == nil && o.QueueID == "":
			unlinked = &o
		}
	}
	o := cmp.Or(same, unlinked)
	if o == nil {
		return Recorded{}, nil
	}
	r := Recorded{ID: o.ID, Added: true}
	if o.QueueID == "" {
		if err := b.uniqueQueueID(e.QueueID, o.ID); err != nil {
			r.RefusedQueueID = e.QueueID
		} else {
			o.QueueID = e.QueueID
		}
	}
	if e.Size > 0 {
		o.Size = e.Size
	}
	o.Recipients = addRecipients(o.Recipients, e.Recipients)
	o.Updated = now
	return r, b.put(o)
}

// addRecipients appends add's addresses have lacks (case-insensitive).
func addRecipients(have, add []string) []string {
	for _, r := range add {
		if r != "" && !slices.ContainsFunc(have, func(o string) bool { return strings.EqualFold(o, r) }) {
			have = append(have, r)
		}
	}
	return have
}

// insert stores new entry e under a new ID, minus (returned) a taken queue ID.
func (b buckets) insert(e *Entry) (refusedQueueID string, err error) {
	if e.ID, err = b.newID(e.Created); err != nil {
		return "", err
	}
	err = b.uniqueQueueID(e.QueueID, e.ID)
	if errors.Is(err, ErrDuplicateQueueID) {
		refusedQueueID, e.QueueID = e.QueueID, ""
	} else if err != nil {
		return "", err
	}
	if err := b.put(e); err != nil {
		return "", err
	}
	return refusedQueueID, b.index(e, false)
}

// RecordFreeze stores e as frozen with r's message, copied into *e; on
// error nothing is stored. Errors: ErrInvalid, ErrFull, r's, bbolt's.
func (s *Store) RecordFreeze(e *Entry, r io.Reader) (Recorded, error) {
	ent, err := s.prepare(e, Frozen)
	if err != nil {
		return Recorded{}, err
	}
	st, err := s.readBody(r)
	if err != nil {
		return Recorded{}, err
	}
	ent.Size, ent.Hash = st.size, st.sum
	subject, id := HeaderInfo(st.head)
	ent.Subject, ent.MessageID = cmp.Or(ent.Subject, subject), cmp.Or(ent.MessageID, id)
	var rec Recorded
	err = s.write("freeze", func(b buckets) (err error) {
		total := getBytes(b.info)
		if s.maxSize > 0 && total+ent.Size > s.maxSize {
			return fmt.Errorf("%w: %d bytes stored, message of %d bytes, limit %d", ErrFull, total, ent.Size, s.maxSize)
		}
		if rec.RefusedQueueID, err = b.insert(&ent); err != nil {
			return err
		}
		if err := b.putBody(ent.ID, st); err != nil {
			return fmt.Errorf("quarantine: store message: %w", err)
		}
		return putBytes(b.t, b.info, total+ent.Size)
	})
	if err != nil {
		s.dropChunks(st.ref)
		return Recorded{}, err
	}
	*e = ent
	rec.ID = ent.ID
	return rec, nil
}

// uniqueQueueID returns ErrDuplicateQueueID if another pending entry has it.
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
		if err == nil && o.QueueID == queueID && o.State.Pending() {
			return fmt.Errorf("%w: queue ID %s already belongs to entry %s", ErrDuplicateQueueID, queueID, o.ID)
		}
		return nil
	})
}

// SetUnverified sets pending entry id's Entry.Unverified ("" clears).
// Errors: ErrNotFound, ErrState, bbolt's.
func (s *Store) SetUnverified(id, reason string) error {
	return s.setText("flag", id, reason, func(e *Entry) *string { return &e.Unverified })
}

// setText sets pending entry id's text field to v.
func (s *Store) setText(op, id, v string, field func(*Entry) *string) error {
	return s.update(op, id, func(_ buckets, e *Entry) error {
		if *field(e) == v {
			return errUnchanged
		}
		if err := needPending(op, e, false); err != nil {
			return err
		}
		*field(e) = v
		return nil
	})
}

// LinkQueueID sets held entry id's missing queue ID. Errors: ErrInvalid,
// ErrState, ErrNotFound, bbolt's.
func (s *Store) LinkQueueID(id, queueID string) error {
	if !ValidQueueID(queueID) {
		return fmt.Errorf("%w: queue ID %q", ErrInvalid, termsafe.Line(queueID))
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

// HeldDetails are what the MTA's queue tells of a held message.
type HeldDetails struct {
	Recipients []string
	Size       int64
	Subject    string
	MessageID  string
}

// CompleteHeld adds d's new recipients, Size, missing Subject and MessageID
// to held entry id. Errors: ErrNotFound, ErrState, bbolt's.
func (s *Store) CompleteHeld(id string, d HeldDetails) error {
	return s.update("complete", id, func(_ buckets, e *Entry) error {
		if e.State != Held {
			return fmt.Errorf("%w: %s is %s", ErrState, id, e.State)
		}
		e.Recipients = addRecipients(e.Recipients, d.Recipients)
		if d.Size > 0 {
			e.Size = d.Size
		}
		e.Subject = cmp.Or(e.Subject, truncate(termsafe.Line(d.Subject), maxSubjectBytes))
		e.MessageID = cmp.Or(e.MessageID, truncate(termsafe.Line(d.MessageID), maxSubjectBytes))
		return nil
	})
}

// errUnchanged ends an update that has nothing to store.
var errUnchanged = errors.New("unchanged")
