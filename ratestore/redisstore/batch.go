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
	v        answer // the answer, once done is closed
	err      error
}

// batcher batches the requests for one Redis server; send makes a call.
type batcher struct {
	mu       sync.Mutex
	inFlight int
	pending  *batch
	send     func(ctx context.Context, reqs ...*request) (answer, error)
	calls    int // calls in flight at most: maxInFlight, 1 for a Cluster master
}

func (s *Store) decideBatched(ctx context.Context, b *batcher, r *request) (answer, error) {
	if err := ctx.Err(); err != nil {
		return answer{}, unavailable(err)
	}
	// The call's deadline is Timeout after arrival; the caller's earlier
	// deadline ends only its own wait.
	dl := time.Now().Add(s.opts.Timeout)
	b.mu.Lock()
	p := b.pending
	if b.inFlight == 0 || p != nil && p.items+len(r.idx) > maxBatchItems {
		// No call in flight, or a full batch waits: r goes alone.
		b.inFlight++
		b.mu.Unlock()
		cctx, cancel := context.WithDeadline(ctx, dl)
		v, err := b.send(cctx, r)
		cancel()
		b.release()
		return v, err
	}
	if p == nil {
		p = &batch{deadline: dl, done: make(chan struct{})}
		b.pending = p
	}
	r.ctx = ctx
	p.reqs = append(p.reqs, r)
	p.items += len(r.idx)
	if dl.Before(p.deadline) {
		p.deadline = dl
	}
	if b.inFlight < b.calls && p.items >= secondCallItems {
		b.pending = nil
		b.inFlight++
		b.mu.Unlock()
		go b.run(p)
	} else {
		b.mu.Unlock()
	}
	// No timer: p runs with its requests' earliest deadline, so done is
	// closed by dl.
	select {
	case <-p.done:
		if r.dropped {
			return answer{}, unavailable(ctx.Err())
		}
		return p.v, p.err
	case <-ctx.Done():
		// Unsent, r will not be sent; if sent, r may still be counted.
		return answer{}, unavailable(ctx.Err())
	}
}

// release ends a call: the pending batch, if any, takes its place.
func (b *batcher) release() {
	b.mu.Lock()
	p := b.pending
	if p == nil {
		b.inFlight--
		b.mu.Unlock()
		return
	}
	b.pending = nil
	b.mu.Unlock()
	go b.run(p)
}

// run sends batch p, skipping requests whose callers gave up, and hands
// them its answer.
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
	b.release()
}
