package redisstore

import (
	"context"
	"sync"
	"time"
)

// Batching per server: requests arriving during a call join one pending
// batch, sent when a call ends or at secondCallItems (up to maxInFlight
// calls); with no call in flight or a full batch, one goes alone.
const (
	maxInFlight     = 2
	secondCallItems = 96
	maxBatchItems   = 256
)

// batch is one script call deciding one or more requests.
type batch struct {
	reqs     []*request
	items    int
	deadline time.Time
	done     chan struct{}
	expired  chan struct{} // closed at deadline: the waits end
	timer    *time.Timer
	v        answer // the answer, once done is closed
	err      error
}

// batcher batches the requests for one Redis server (not a Cluster:
// its calls declare keys of many slots); send makes a call.
type batcher struct {
	mu       sync.Mutex
	inFlight int
	pending  *batch
	send     func(ctx context.Context, reqs ...*request) (answer, error)
}

// decideBatched decides r in a call of b's. It returns by Timeout after
// r's arrival (or ctx's end) even when the call outlives its deadline, as
// rueidis's does while it waits on another caller's dial.
func (s *Store) decideBatched(ctx context.Context, b *batcher, r *request) (answer, error) {
	if err := ctx.Err(); err != nil {
		return answer{}, unavailable(err)
	}
	// The call's deadline is Timeout after arrival; the caller's earlier
	// deadline ends only its own wait.
	dl := time.Now().Add(s.opts.Timeout)
	r.ctx = ctx
	b.mu.Lock()
	p := b.pending
	switch {
	case b.inFlight == 0 || p != nil && p.items+len(r.idx) > maxBatchItems:
		// No call in flight, or a full batch waits: r goes alone.
		p = newBatch(dl)
		p.reqs = append(p.reqs, r)
		b.inFlight++
		go b.run(p)
	default:
		if p == nil {
			p = newBatch(dl)
			b.pending = p
		}
		p.reqs = append(p.reqs, r)
		p.items += len(r.idx)
		if b.inFlight < maxInFlight && p.items >= secondCallItems {
			b.pending = nil
			b.inFlight++
			go b.run(p)
		}
	}
	b.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		// Unsent, r will not be sent; if sent, r may still be counted.
		return answer{}, unavailable(ctx.Err())
	case <-p.expired:
		select {
		case <-p.done:
		default: // the call outlived its deadline: r may still be counted
			return answer{}, unavailable(context.DeadlineExceeded)
		}
	}
	if r.dropped {
		return answer{}, unavailable(ctx.Err())
	}
	return p.v, p.err
}

// newBatch returns an empty batch whose waits end at deadline (its first's).
func newBatch(deadline time.Time) *batch {
	p := &batch{deadline: deadline, done: make(chan struct{}), expired: make(chan struct{})}
	p.timer = time.AfterFunc(time.Until(deadline), func() { close(p.expired) })
	return p
}

// release ends a call: the pending batch, if any, takes its place.
func (b *batcher) release() {
	b.mu.Lock()
	p := b.pending
	b.pending = nil
	if p == nil {
		b.inFlight--
	}
	b.mu.Unlock()
	if p != nil {
		go b.run(p)
	}
}

// run sends p without the requests whose callers gave up.
func (b *batcher) run(p *batch) {
	live := p.reqs[:0]
	for _, r := range p.reqs {
		if r.ctx.Err() != nil {
			r.dropped = true
			continue
		}
		live = append(live, r)
	}
	if len(live) > 0 {
		ctx, cancel := context.WithDeadline(context.Background(), p.deadline)
		p.v, p.err = b.send(ctx, live...)
		cancel()
	}
	close(p.done)
	p.timer.Stop()
	b.release()
}
