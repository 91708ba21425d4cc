package quarantine

import (
	"errors"
	"strings"
	"testing"
)

// TestTwoEntriesNeverShareAQueueID: RecordHold, RecordFreeze, RecordHold(addOnly)
// and LinkQueueID refuse a queue ID another pending entry has, so a forged
// request cannot record a second entry naming the same queued message; a
// thawed entry's queue ID no longer counts.
func TestTwoEntriesNeverShareAQueueID(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	first, err := hold(s, &Entry{Key: "alice", QueueID: "3F2A1B4C5D"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := hold(s, &Entry{Key: "mallory", Instance: "forged.1"})
	if r, err := s.RecordHold(&Entry{Instance: "forged.1", QueueID: "3F2A1B4C5D"}, true); err != nil || r.ID != other || r.RefusedQueueID != "3F2A1B4C5D" {
		t.Errorf("RecordHold(addOnly) with the queue ID: %+v %v", r, err)
	}
	if r, err := s.RecordHold(&Entry{Key: "mallory", QueueID: "3F2A1B4C5D"}, false); err != nil || r.Added || r.RefusedQueueID != "3F2A1B4C5D" {
		t.Errorf("RecordHold with the queue ID: %+v %v", r, err)
	} else if e, _ := s.Get(r.ID); e.QueueID != "" {
		t.Errorf("RecordHold kept queue ID %q", e.QueueID)
	}
	if r, err := s.RecordFreeze(&Entry{Key: "mallory", QueueID: "3F2A1B4C5D"}, strings.NewReader("Subject: x\r\n\r\nx\r\n")); err != nil || r.RefusedQueueID != "3F2A1B4C5D" {
		t.Errorf("RecordFreeze with the queue ID: %+v %v", r, err)
	} else if e, _ := s.Get(r.ID); e.QueueID != "" || e.State != Frozen {
		t.Errorf("RecordFreeze: %+v", e)
	}
	if err := s.LinkQueueID(other, "3F2A1B4C5D"); !errors.Is(err, ErrState) || !errors.Is(err, ErrDuplicateQueueID) {
		t.Errorf("LinkQueueID with the queue ID: %v", err)
	}
	if e, _ := s.Get(other); e.QueueID != "" {
		t.Errorf("the second entry got queue ID %q", e.QueueID)
	}
	if err := s.SetUnverified(first, "not on hold"); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(first); e.Unverified != "not on hold" {
		t.Errorf("Unverified %q", e.Unverified)
	}
	if err := s.MarkThawed(first, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := hold(s, &Entry{Key: "alice", QueueID: "3F2A1B4C5D"}); err != nil {
		t.Errorf("Hold with the queue ID of a thawed entry: %v", err)
	}
}
