package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/mailout"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// Selection is what Thaw and Delete act on: IDs, or the pending entries
// matching the filters, oldest first.
type Selection struct {
	IDs       []string      `json:"ids,omitempty"`
	Sender    string        `json:"sender,omitempty"`
	Key       string        `json:"key,omitempty"`
	OlderThan time.Duration `json:"older_than,omitempty"`
	// ResetRate (Thaw) forgets the keys' rates first.
	ResetRate bool `json:"reset_rate,omitempty"`
	// Again (Thaw, IDs only) re-injects thawed messages still kept.
	Again bool `json:"again,omitempty"`
	// Force acts on interrupted frozen entries; with Delete it also
	// forgets unconfirmed held entries.
	Force bool `json:"force,omitempty"`
	// By names who asked, for the log and Events.
	By string `json:"-"`
}

// Outcome is the result of a Thaw or Delete for one entry.
type Outcome struct {
	ID        string `json:"id"`
	Sender    string `json:"sender"`
	Key       string `json:"key"`
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
	Note      string `json:"note,omitempty"`       // qualifies a success
	RateReset bool   `json:"rate_reset,omitempty"` // Key's rate was reset first
}

func (s *Service) selectEntries(sel Selection) ([]quarantine.Entry, error) {
	if len(sel.IDs) > 0 {
		out := make([]quarantine.Entry, 0, len(sel.IDs))
		for _, id := range sel.IDs {
			e, err := s.q.Get(id)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", termsafe.Line(id), err)
			}
			out = append(out, e)
		}
		return out, nil
	}
	if sel.Sender == "" && sel.Key == "" && sel.OlderThan <= 0 {
		return nil, errors.New("name IDs, --sender, --key or --older-than")
	}
	f := quarantine.Filter{Sender: sel.Sender, Key: sel.Key, OldestFirst: true}
	if sel.OlderThan > 0 {
		f.Before = s.now().Add(-sel.OlderThan)
	}
	return s.q.List(f)
}

// List is Store.List, held entries first completed from the MTA's queue.
func (s *Service) List(f quarantine.Filter) ([]quarantine.Entry, error) {
	s.completeNow()
	return s.q.List(f)
}

// Thaw releases the selected entries (Queue.Release, or re-injection with
// X-Ratelimitd-Thawed); the error is the selection's, the Outcomes hold more.
func (s *Service) Thaw(ctx context.Context, sel Selection) ([]Outcome, error) {
	entries, err := s.selectEntries(sel)
	if err != nil {
		return nil, err
	}
	if sel.Again && len(sel.IDs) == 0 {
		return nil, errors.New("thaw --again needs the IDs of thawed messages (see ratelimitd quarantine list --state thawed)")
	}
	if sel.ResetRate && s.opts.Rates == nil {
		return nil, errors.New("the rates cannot be reset here: thaw without --reset-rate, then ratelimitd rate reset KEY")
	}
	done := map[string]bool{} // keys whose rate was reset
	for _, e := range entries {
		if !sel.ResetRate || e.Key == "" || done[e.Key] {
			continue
		}
		done[e.Key] = true
		n, err := s.opts.Rates.Reset(ctx, e.Key, "")
		if err != nil {
			return nil, fmt.Errorf("reset rate of %s: %w", e.Key, err)
		}
		s.log.Info("rate reset", "key", e.Key, "removed", n, "by", sel.By, "with", "quarantine thaw")
		s.emit(ctx, RateReset, quarantine.Entry{Key: e.Key}, sel.By, plural.N(n, "rate state")+" removed with a thaw")
	}
	return s.apply("quarantine thaw", entries, sel, done, func(e quarantine.Entry) (string, error) {
		return s.release(ctx, e, sel.By, sel.Force, sel.Again, Thawed)
	}), nil
}

// apply runs op on each entry; reset names the keys whose rate was reset.
func (s *Service) apply(what string, entries []quarantine.Entry, sel Selection, reset map[string]bool,
	op func(quarantine.Entry) (string, error)) []Outcome {
	out := make([]Outcome, 0, len(entries))
	for _, e := range entries {
		note, err := op(e)
		o := Outcome{ID: e.ID, Sender: e.Sender, Key: e.Key, OK: err == nil, Note: note, RateReset: reset[e.Key]}
		if err != nil {
			o.Error = err.Error()
		}
		s.log.Info(what, "id", e.ID, "state", e.State.String(), "sender", e.Sender, "key", e.Key,
			"queue_id", e.QueueID, "ok", o.OK, "err", o.Error, "note", o.Note, "by", sel.By)
		out = append(out, o)
	}
	return out
}

// release claims, releases and marks e thawed (again: thawed e's kept
// message re-injected); it returns a note.
func (s *Service) release(ctx context.Context, e quarantine.Entry, by string, force, again bool, kind Kind) (string, error) {
	var err error
	if e, err = s.q.Claim(e.ID, s.token, force, again); err != nil {
		return "", err
	} else if again {
		e.State = quarantine.Frozen // re-injected as the frozen message it was
	} else if e, err = s.confirmHeld(ctx, e); err != nil {
		s.recordError(e.ID, err)
		return "", err
	}
	note, to, as := "", "", ""
	switch e.State {
	case quarantine.Held:
		var warn error
		if warn, err = s.releaseHeld(ctx, "release", s.queue.Release, e.QueueID); err == nil && warn != nil {
			note = "released, but: " + warn.Error()
		}
	case quarantine.Frozen:
		var reply string
		if to, reply, err = s.reinject(ctx, e); err == nil {
			reply = clip(reply, 200) // the server's words, stored and shown
			note = "re-injected to " + to + ", answered 250 " + reply
			if as = mailout.QueuedAs(reply); as != "" {
				note = "re-injected to " + to + ", queued as " + as
			}
			as = cmp.Or(as, reply)
		}
	}
	if err != nil {
		s.recordError(e.ID, err)
		return "", err
	}
	if err := s.q.MarkThawed(e.ID, to, as); err != nil {
		// Loud: on restart a frozen entry needs --force.
		s.failed("store", err, "a released message could not be marked thawed", "id", e.ID)
		return "", fmt.Errorf("released, but recording it failed: %w", err)
	}
	if again {
		note = "again: " + note
	} else {
		s.forget(e.Key)
	}
	e.State, e.ThawedTo, e.ThawedAs = quarantine.Thawed, to, as
	s.emit(ctx, kind, e, by, note)
	return note, nil
}

func (s *Service) recordError(id string, err error) {
	if rerr := s.q.RecordThawError(id, termsafe.Line(err.Error())); rerr != nil {
		s.failed("store", rerr, "recording a failed release failed", "id", id, "release_err", err)
	}
}

// reinject sends frozen e; it returns the listener's address and reply.
func (s *Service) reinject(ctx context.Context, e quarantine.Entry) (string, string, error) {
	if s.opts.Reinjector == nil {
		return "", "", errors.New("lifecycle: no re-injection listener configured")
	}
	msg, err := s.q.Message(e.ID)
	if err != nil {
		return "", "", err
	}
	// Every recipient sees it: no key (the sender's login), limit or operator.
	hdr := fmt.Sprintf("X-Ratelimitd-Thawed: id=%s; frozen=%s; thawed=%s", e.ID,
		e.Created.UTC().Format(time.RFC3339), s.now().UTC().Format(time.RFC3339))
	reply, err := s.opts.Reinjector.Reinject(ctx, e.Sender, e.Recipients, mta.ReplyText(hdr, 900), msg)
	if err != nil {
		s.fail("reinject", err)
		return "", "", err
	}
	return s.opts.Reinjector.Addr, reply, nil
}

// Delete deletes the selected entries and held mail in the MTA's queue;
// held without queue ID: forgotten, unconfirmed: refused unless Force.
func (s *Service) Delete(ctx context.Context, sel Selection) ([]Outcome, error) {
	entries, err := s.selectEntries(sel)
	if err != nil {
		return nil, err
	}
	return s.apply("quarantine delete", entries, sel, nil, func(e quarantine.Entry) (string, error) {
		e, err := s.q.Claim(e.ID, s.token, sel.Force, false)
		if err != nil {
			return "", err
		}
		note := ""
		e, err = s.confirmHeld(ctx, e)
		switch {
		case err != nil && sel.Force:
			note = "the MTA's queue does not confirm the queue ID: the record is forgotten, the MTA's queue was not touched"
		case err != nil:
			s.q.Unclaim(e.ID, s.token, "")
			return "", fmt.Errorf("%w (--force forgets the record without touching the MTA's queue)", err)
		case e.State == quarantine.Held:
			if e.QueueID == "" {
				note = "no queue ID was recorded: the MTA's queue was not touched"
			} else if err = checkQueueID(e.QueueID); err == nil {
				err = s.queue.Delete(ctx, e.QueueID)
			}
			if err != nil {
				s.fail("delete", err)
				s.q.Unclaim(e.ID, s.token, termsafe.Line(err.Error()))
				return "", err
			}
		}
		if err := s.q.Delete(e.ID); err != nil {
			s.fail("store", err)
			return "", err
		}
		s.forget(e.Key)
		e.State = quarantine.Deleted
		s.emit(ctx, Deleted, e, sel.By, note)
		return note, nil
	}), nil
}

// Show returns the entry and its message: a preview (raw: the bytes) for
// frozen mail, Queue.Show's output (uncleaned) for held mail. Errors:
// quarantine.ErrNotFound, or why the message is unavailable.
func (s *Service) Show(ctx context.Context, id string, raw bool) (quarantine.Entry, []byte, error) {
	s.completeNow()
	e, err := s.q.Get(id)
	if err != nil {
		return e, nil, err
	}
	var body []byte
	switch {
	case e.State == quarantine.Frozen || e.State == quarantine.Thawed && e.Hash != "":
		body, err = s.q.Message(id)
		if e.State == quarantine.Thawed && errors.Is(err, quarantine.ErrNoContent) {
			return e, nil, nil // swept after keep_thawed
		}
		if err == nil && !raw {
			p, perr := quarantine.PreviewMessage(ctx, body, 0)
			if body, err = []byte(p.String()), perr; err != nil {
				body = nil
			}
		}
	case e.State == quarantine.Held:
		if e.QueueID == "" {
			// Linking the queue ID found in the listing needs the claim.
			if e, err = s.q.Claim(id, s.token, false, false); err != nil {
				return e, nil, err
			}
			e, err = s.confirmHeld(ctx, e)
			s.q.Unclaim(id, s.token, "")
		} else {
			e, err = s.confirmHeld(ctx, e)
		}
		if err != nil {
			return e, nil, err
		}
		if err = checkQueueID(e.QueueID); err == nil {
			body, err = s.queue.Show(ctx, e.QueueID)
		}
	}
	return e, body, err
}

// Suspend stops automatic release for key or, resume, allows it again
// and reports whether it was suspended; by names who.
func (s *Service) Suspend(key, by string, resume bool) (bool, error) {
	was, err := s.q.Suspend(key, by, resume)
	what := "automatic release suspended"
	if resume {
		what = "automatic release resumed"
	}
	if err == nil && (was || !resume) {
		s.log.Info(what, "key", key, "by", by)
	}
	return was, err
}
