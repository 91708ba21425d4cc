package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// AutoRelease releases, for every key with held or frozen mail stopped
// by a drip limit (Options.DripLimits), the oldest such message when the
// key is back under that limit (the rate engine would let a message of
// cost 1 through now), is not suspended, and its last automatic release
// was at least period/limit ago (the limit's own rate; overrides apply).
// So a key's backlog leaves the quarantine one message per period/limit
// once the sender has slowed down, and stops whenever the sender is
// refused again. It returns how many messages it released. Errors are
// logged and counted, never returned: the next call tries again.
func (s *Service) AutoRelease(ctx context.Context, now time.Time) int {
	s.mu.Lock()
	drip := s.drip
	s.mu.Unlock()
	if len(drip) == 0 || s.opts.Rates == nil {
		return 0
	}
	pending, err := s.q.List(quarantine.Filter{OldestFirst: true})
	if err != nil {
		s.fail("auto-release", err)
		s.log.Error("automatic release: listing failed", "err", err)
		return 0
	}
	suspended, err := s.q.Suspended()
	if err != nil {
		s.fail("auto-release", err)
		s.log.Error("automatic release: reading suspended keys failed", "err", err)
		return 0
	}
	released := 0
	seen := map[string]bool{} // limit+key considered in this pass
	for _, e := range pending {
		if !drip[e.Limit] || e.Key == "" || (e.Claim != "" && e.State == quarantine.Frozen) {
			// A claimed frozen message is being thawed, or its last
			// thaw was interrupted: that needs an operator (--force).
			continue
		}
		lk := e.Limit + "\x00" + e.Key
		if seen[lk] {
			continue // one message per key and limit per pass: the oldest
		}
		seen[lk] = true
		if _, ok := suspended[e.Key]; ok {
			continue
		}
		interval, ok := s.underLimit(ctx, now, e.Limit, e.Key)
		if !ok {
			continue
		}
		s.mu.Lock()
		last, had := s.lastDrip[lk]
		s.mu.Unlock()
		if had && now.Sub(last) < interval {
			continue
		}
		note, err := s.release(ctx, e, "auto-release", false, Released)
		if errors.Is(err, quarantine.ErrBusy) {
			continue // an operator is thawing it right now
		}
		s.mu.Lock()
		s.lastDrip[lk] = now
		if len(s.lastDrip) > maxAwaiting {
			clear(s.lastDrip) // bounded; forgetting only lets one message out early
			s.lastDrip[lk] = now
		}
		s.mu.Unlock()
		if err != nil {
			s.fail("auto-release", err)
			s.log.Error("automatic release failed; the message stays quarantined", "id", e.ID, "key", e.Key,
				"limit", e.Limit, "err", err)
			continue
		}
		released++
		s.m.autoReleased.Inc()
		s.log.Info("quarantine auto-release", "id", e.ID, "state", e.State.String(), "sender", e.Sender, "key", e.Key,
			"limit", e.Limit, "queue_id", e.QueueID, "note", note)
	}
	return released
}

// underLimit reports whether key is under limit now, and the interval
// between two automatic releases at that limit's rate (period / limit in
// force for the key).
func (s *Service) underLimit(ctx context.Context, now time.Time, limit, key string) (time.Duration, bool) {
	rates, err := s.opts.Rates.Lookup(ctx, now, key)
	if err != nil {
		s.fail("auto-release", err)
		s.log.Error("automatic release: reading the rate failed", "key", key, "err", err)
		return 0, false
	}
	for _, r := range rates {
		if r.Limit != limit {
			continue
		}
		if r.Refusing || r.Max <= 0 {
			return 0, false
		}
		return time.Duration(float64(r.Period) / r.Max), true
	}
	// No state: the rate has decayed to nothing (or was reset).
	for _, l := range s.opts.Rates.Limits() {
		if l.Name != limit {
			continue
		}
		max := l.Limit
		if v, ok := l.Overrides[key]; ok {
			max = v
		}
		if max <= 0 {
			return 0, false
		}
		return time.Duration(float64(l.Period) / max), true
	}
	return 0, false // the limit is no longer configured: wait for an operator
}

// Run runs expiry every expireEvery (and once at start) and automatic
// release every dripEvery until ctx is done. Zero durations mean one hour
// and five seconds.
func (s *Service) Run(ctx context.Context, expireEvery, dripEvery time.Duration) {
	if expireEvery <= 0 {
		expireEvery = time.Hour
	}
	if dripEvery <= 0 {
		dripEvery = 5 * time.Second
	}
	et := time.NewTicker(expireEvery)
	defer et.Stop()
	dt := time.NewTicker(dripEvery)
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
			s.CompleteHeld(ctx)
		}
	}
}
