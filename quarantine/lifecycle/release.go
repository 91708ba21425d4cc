package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// AutoRelease releases each unsuspended key's oldest message under a drip
// limit, period/limit after the last; it returns how many, logs errors.
func (s *Service) AutoRelease(ctx context.Context, now time.Time) int {
	s.mu.Lock()
	drip := s.drip
	s.mu.Unlock()
	if len(drip) == 0 || s.opts.Rates == nil {
		s.endRuns(ctx, func(string) (string, bool) { return "auto_release turned off", true }, nil)
		return 0
	}
	pending, err := s.q.List(quarantine.Filter{OldestFirst: true})
	if err != nil {
		s.failed("auto-release", err, "automatic release: listing failed")
		return 0
	}
	suspended, err := s.q.Suspended()
	if err != nil {
		s.failed("auto-release", err, "automatic release: reading suspended keys failed")
		return 0
	}
	released := 0
	seen := map[string]bool{} // limit+key considered in this pass
	left := map[string]int{}  // limit+key: messages still held or frozen
	stopped := map[string]string{}
	for _, e := range pending {
		lk := e.Limit + "\x00" + e.Key
		left[lk]++
		if !slices.Contains(drip, e.Limit) || e.Key == "" || (e.Claim != "" && e.State == quarantine.Frozen) {
			// Being thawed, or interrupted (--force).
			continue
		}
		if seen[lk] {
			continue // one message per key and limit per pass: the oldest
		}
		seen[lk] = true
		if _, ok := suspended[e.Key]; ok {
			stopped[lk] = "suspended"
			continue
		}
		interval, ok := s.underLimit(ctx, now, e.Limit, e.Key)
		if !ok {
			stopped[lk] = "refused again"
			continue
		}
		s.mu.Lock()
		last, had := s.lastDrip[lk]
		s.mu.Unlock()
		if had && now.Sub(last) < interval {
			continue
		}
		note, err := s.release(ctx, e, "auto-release", false, false, Released)
		if errors.Is(err, quarantine.ErrBusy) {
			continue // an operator is thawing it right now
		}
		s.mu.Lock()
		if len(s.lastDrip) >= maxAwaiting {
			clear(s.lastDrip) // bounded; forgetting only lets one message out early
		}
		s.lastDrip[lk] = now
		if err == nil {
			r := cmp.Or(s.runs[lk], &dripRun{})
			r.count, r.last = r.count+1, e
			s.runs[lk] = r
		}
		s.mu.Unlock()
		if err != nil {
			s.failed("auto-release", err, "automatic release failed; the message stays quarantined",
				"id", e.ID, "key", e.Key, "limit", e.Limit)
			continue
		}
		released++
		left[lk]--
		s.m.autoReleased.Inc()
		s.log.Info("quarantine auto-release", "id", e.ID, "state", e.State.String(), "sender", e.Sender, "key", e.Key,
			"limit", e.Limit, "queue_id", e.QueueID, "note", note)
	}
	s.endRuns(ctx, func(lk string) (string, bool) {
		if left[lk] <= 0 {
			return "", true
		}
		reason, ok := stopped[lk]
		return reason, ok
	}, left)
	return released
}

type dripRun struct {
	count, left int // released; pending when it ended
	last        quarantine.Entry
	reason      string // why it ended
}

// endRuns reports and forgets the drip runs ended picks (with why); left: pending.
func (s *Service) endRuns(ctx context.Context, ended func(lk string) (string, bool), left map[string]int) {
	var over []*dripRun
	s.mu.Lock()
	for lk, r := range s.runs {
		if reason, ok := ended(lk); ok {
			r.reason, r.left = reason, max(left[lk], 0)
			over = append(over, r)
			delete(s.runs, lk)
		}
	}
	s.mu.Unlock()
	for _, r := range over {
		s.log.Info("quarantine auto-release run ended", "key", r.last.Key, "limit", r.last.Limit,
			"released", r.count, "left", r.left, "why", r.reason)
		s.ev.QuarantineEvent(ctx, Event{Kind: ReleaseRun, Time: s.now(), Entry: r.last, By: "auto-release",
			Detail: r.reason, Count: r.count, Pending: r.left})
	}
}

// underLimit reports whether key is under limit now, and period/limit.
func (s *Service) underLimit(ctx context.Context, now time.Time, limit, key string) (time.Duration, bool) {
	rates, err := s.opts.Rates.Lookup(ctx, now, key)
	if err != nil {
		s.failed("auto-release", err, "automatic release: reading the rate failed", "key", key)
		return 0, false
	}
	if i := slices.IndexFunc(rates, func(r policy.KeyRate) bool { return r.Limit == limit }); i >= 0 {
		r := rates[i]
		return time.Duration(float64(r.Period) / r.Max), !r.Refusing && r.Max > 0
	}
	// No state: the rate has decayed to nothing (or was reset).
	limits := s.opts.Rates.Limits()
	if i := slices.IndexFunc(limits, func(l policy.LimitInfo) bool { return l.Name == limit }); i >= 0 {
		max, ok := limits[i].Overrides[key]
		if !ok {
			max = limits[i].Limit
		}
		return time.Duration(float64(limits[i].Period) / max), max > 0
	}
	return 0, false // the limit is no longer configured: wait for an operator
}

// Run runs Expire now and every expireEvery (0: 1h), AutoRelease and
// complete every dripEvery (0: 5s), until ctx ends.
func (s *Service) Run(ctx context.Context, expireEvery, dripEvery time.Duration) {
	et := time.NewTicker(cmp.Or(max(expireEvery, 0), time.Hour))
	defer et.Stop()
	dt := time.NewTicker(cmp.Or(max(dripEvery, 0), 5*time.Second))
	defer dt.Stop()
	s.Expire(ctx, s.now())
	s.noteIncompleteStored()
	for {
		select {
		case <-ctx.Done():
			return
		case <-et.C:
			s.Expire(ctx, s.now())
		case <-dt.C:
			s.AutoRelease(ctx, s.now())
			s.complete(ctx, true)
		}
	}
}
