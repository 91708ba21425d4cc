package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

const (
	maxIncomplete    = 10000 // held entries waiting to be completed
	completeAttempts = 12    // counted complete runs that look for a message
)

func (s *Service) noteIncomplete(id string) {
	s.mu.Lock()
	if _, ok := s.incomplete[id]; !ok && len(s.incomplete) < maxIncomplete {
		s.incomplete[id] = 0
	}
	s.mu.Unlock()
}

// noteIncompleteStored marks stored held entries lacking size or subject.
func (s *Service) noteIncompleteStored() {
	es, err := s.q.List(quarantine.Filter{States: []quarantine.State{quarantine.Held}})
	if err != nil {
		s.fail("list", err)
		return
	}
	for _, e := range es {
		if e.Size == 0 || e.Subject == "" {
			s.noteIncomplete(e.ID)
		}
	}
}

// completeTimeout bounds the completion a listing waits for.
const completeTimeout = 10 * time.Second

// completeNow completes the waiting held entries before a listing.
func (s *Service) completeNow() {
	s.mu.Lock()
	n := len(s.incomplete)
	s.mu.Unlock()
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	s.complete(ctx, false)
}

// complete fills recently held entries from the MTA's queue, up to
// completeAttempts counted runs each, and returns how many it completed;
// count says whether attempts and a failed listing count. Calls run one
// at a time.
func (s *Service) complete(ctx context.Context, count bool) (completed int) {
	s.completeMu.Lock()
	defer s.completeMu.Unlock()
	s.mu.Lock()
	ids := slices.Sorted(maps.Keys(s.incomplete))
	s.mu.Unlock()
	if len(ids) == 0 {
		return 0
	}
	msgs, err := s.queue.List(ctx)
	if errors.Is(err, quarantine.ErrNoQueueList) {
		msgs, err = nil, nil // the queue files are still shown (Queue.Show)
	}
	if err != nil {
		if count { // a listing's completion leaves reporting to the periodic run
			s.failed("queue_list", err, "listing the MTA's queue to complete held messages failed")
		}
		return 0
	}
	for _, id := range ids {
		done := s.completeOne(ctx, id, msgs)
		s.mu.Lock()
		if done {
			delete(s.incomplete, id)
			completed++
		} else if count {
			if s.incomplete[id]++; s.incomplete[id] >= completeAttempts {
				delete(s.incomplete, id)
			}
		}
		s.mu.Unlock()
	}
	return completed
}

// completeOne completes held entry id from msgs (nil: header only) and
// reports whether it is done.
func (s *Service) completeOne(ctx context.Context, id string, msgs []quarantine.QueuedMessage) bool {
	e, err := s.q.Get(id)
	if err != nil || e.State != quarantine.Held {
		return true // gone, released or deleted meanwhile
	}
	if e.QueueID == "" {
		if e = s.linkQueued(e, msgs); e.QueueID == "" {
			return false
		}
	}
	var d quarantine.HeldDetails
	if msgs != nil {
		i := slices.IndexFunc(msgs, func(m quarantine.QueuedMessage) bool { return m.QueueID == e.QueueID })
		if i < 0 {
			return false // not queued yet
		}
		d.Recipients, d.Size = msgs[i].Recipients, msgs[i].Size
	}
	if e.Subject == "" && checkQueueID(e.QueueID) == nil {
		out, err := s.queue.Show(ctx, e.QueueID)
		if err != nil {
			return false
		}
		d.Subject, d.MessageID = quarantine.HeaderInfo(messageContents(out))
	}
	err = s.q.CompleteHeld(id, d)
	if err != nil && !errors.Is(err, quarantine.ErrState) && !errors.Is(err, quarantine.ErrNotFound) {
		s.failed("store", err, "completing a held message's entry failed", "id", id)
		return false
	}
	return true
}

// messageContents returns what follows postcat's "*** MESSAGE CONTENTS".
func messageContents(out []byte) []byte {
	_, after, found := bytes.Cut(out, []byte("*** MESSAGE CONTENTS"))
	if !found {
		return out
	}
	_, body, _ := bytes.Cut(after, []byte("\n"))
	return body
}
