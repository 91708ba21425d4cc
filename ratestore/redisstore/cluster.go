package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// clusterRouting keeps each slot's master (CLUSTER SLOTS) and its batcher.
type clusterRouting struct {
	owners     atomic.Pointer[[slotCount]string]
	refreshing atomic.Bool
	lastMu     sync.Mutex
	last       time.Time
	nodes      sync.Map // address -> *batcher
}

// slotRefreshEvery bounds how often the slot map is read again.
const slotRefreshEvery = 100 * time.Millisecond

// decideInCluster decides r (one slot) batched for slot's master, else
// alone through the cluster client (MOVED, ASK); failures are final.
func (s *Store) decideInCluster(ctx context.Context, r *request, slot uint16) (answer, error) {
	dl := time.Now().Add(s.opts.Timeout)
	if b := s.nodeBatcher(slot); b != nil {
		v, err := s.decideBatched(ctx, b, r)
		if err == nil {
			if flag, _ := v.item(r.base); flag&flagNotHere == 0 {
				return v, nil
			}
		} else if !errors.Is(err, errNotHere) {
			return v, err
		}
		s.refreshSlots()
	}
	cctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	return s.exec(cctx, "", "d", "", "", r)
}

// nodeBatcher returns the batcher of slot's master, or nil if not known.
func (s *Store) nodeBatcher(slot uint16) *batcher {
	owners := s.routing.owners.Load()
	if owners == nil {
		s.refreshSlots()
		return nil
	}
	addr := owners[slot]
	if addr == "" {
		return nil
	}
	if b, ok := s.routing.nodes.Load(addr); ok {
		return b.(*batcher)
	}
	b := &batcher{calls: 1, send: func(ctx context.Context, reqs ...*request) (answer, error) {
		return s.exec(ctx, addr, "d", s.clockArg(), "", reqs...)
	}}
	v, _ := s.routing.nodes.LoadOrStore(addr, b)
	return v.(*batcher)
}

// refreshSlots rereads the slot map in the background (slotRefreshEvery).
func (s *Store) refreshSlots() {
	rt := &s.routing
	rt.lastMu.Lock()
	if time.Since(rt.last) < slotRefreshEvery {
		rt.lastMu.Unlock()
		return
	}
	rt.last = time.Now()
	rt.lastMu.Unlock()
	if !rt.refreshing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer rt.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), max(s.opts.Timeout, time.Second))
		defer cancel()
		if owners, err := s.slotOwners(ctx); err == nil {
			rt.owners.Store(owners)
		}
	}()
}
