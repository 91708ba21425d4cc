package redisstore

import (
	"context"
	"sync"
	"time"
)

// Batching of concurrent requests, per Redis server: the one standalone
// or Sentinel-managed Redis, or each Redis Cluster master (one script
// call decides requests of many slots, all served by that master). While
// a script call of EvaluateStack is in flight to a server, the
// requests that arrive wait in one pending batch and are then decided
// together by one call, in arrival order, up to maxBatchItems limits per
// call. The pending batch is sent when a call in flight ends, or as a
// second call in flight once it holds secondCallItems limits, so that
// under load Redis has the next batch queued when it finishes one instead
// of waiting for the daemon's turnaround, while batches stay large enough
// to share a call's fixed cost. A request that finds the pending batch
// full gets a call of its own at once (so under overload more calls are
// in flight, and such a request may be decided before the batch that
// waits). An idle store adds no wait: a request that finds no call in
// flight is sent at once.
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

// batcher collects the requests for one Redis server that arrive while
// calls are in flight (at most maxInFlight, but for requests that found
// the batch full); send makes a call.
type batcher struct {
	mu       sync.Mutex
	inFlight int
	pending  *batch
	send     func(ctx context.Context, reqs ...*request) (answer, error)
	// single, if set, allows one call in flight, not maxInFlight.
	single bool
}

// calls is how many calls b lets be in flight before requests wait.
func (b *batcher) calls() int {
	if b.single {
		return 1
	}
	return maxInFlight
}

// decideBatched decides r in phase "d" on Redis's clock through b,
// batched with the requests of other goroutines (see maxInFlight).
func (s *Store) decideBatched(ctx context.Context, b *batcher, r *request) (answer, error) {
	if err := ctx.Err(); err != nil {
		return answer{}, unavailable(err)
	}
	// The call's deadline is redis_timeout after the request's arrival;
	// a caller's own earlier deadline ends only its own wait (select
	// below), never the call of the other requests of its batch.
	dl := time.Now().Add(s.opts.Timeout)
	b.mu.Lock()
	p := b.pending
	if b.inFlight == 0 || p != nil && p.items+len(r.idx) > maxBatchItems {
		// No call in flight, or a full batch waits already: this
		// request goes alone.
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
	if b.inFlight < b.calls() && p.items >= secondCallItems {
		b.pending = nil
		b.inFlight++
		b.mu.Unlock()
		go b.run(p)
	} else {
		b.mu.Unlock()
	}
	// No timer of its own: the calls in flight end by their deadlines,
	// which are earlier (their requests came first), and p runs with the
	// earliest deadline of its requests, so done is closed by dl.
	select {
	case <-p.done:
		if r.dropped {
			return answer{}, unavailable(ctx.Err())
		}
		return p.v, p.err
	case <-ctx.Done():
		// A request still waiting when its batch is sent is not sent
		// (run); one already sent may still be decided and counted,
		// as a script call whose answer came too late would.
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

// run sends batch p and hands its answer to its requests.
// The requests whose callers have given up are not sent: nothing counts
// a request its MTA will ask again.
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
