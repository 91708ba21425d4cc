package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// OnError is what a Failover does with a request while Redis does not
// answer (configuration key on_redis_error).
type OnError uint8

const (
	// Local decides with this host's own store: each host counts alone
	// during the outage; on recovery the states decided locally are
	// pushed to Redis where they are stricter, so a sender refused during
	// the outage is still refused.
	Local OnError = iota
	// Dunno answers DUNNO (fail open; counted as a fault).
	Dunno
	// Defer answers 450 4.7.1 (try again later) to every request.
	Defer
)

var onErrorNames = [...]string{"local", "dunno", "defer"}

// String returns the configuration name of o.
func (o OnError) String() string {
	if int(o) < len(onErrorNames) {
		return onErrorNames[o]
	}
	return fmt.Sprintf("onerror(%d)", uint8(o))
}

// ParseOnError maps "local", "dunno" or "defer" to an OnError; any other
// name wraps ErrConfig.
func ParseOnError(s string) (OnError, error) {
	for i, n := range onErrorNames {
		if n == s {
			return OnError(i), nil
		}
	}
	return 0, fmt.Errorf("%w: on_redis_error %q (want local, dunno or defer)", ErrConfig, s)
}

// maxTouched bounds the (limit, key) pairs a Failover remembers deciding
// locally during one outage; beyond it the oldest outage states are not
// pushed on recovery (they still decide locally).
const maxTouched = 1 << 20

// Failover is the daemon's rate store with the Redis backend: the Redis
// Store while Redis answers, and OnError's policy while it does not. It
// implements policy.Store and policy.StackEvaluator and is safe for
// concurrent use.
//
// The first request that Redis fails to answer within its timeout switches
// the Failover to degraded (logged once, with the cause); from then on
// requests do not wait for Redis, and a probe pings it every ProbeInterval.
// When Redis answers again the states decided locally are merged into it
// (Store.Merge: the stricter one wins) and the Failover switches back
// (logged once). Local decisions use the host's clock corrected by the
// offset to Redis's clock last measured, so the states pushed back are on
// Redis's time base.
//
// The `rate` commands read and reset the shared state; while Redis is down
// Get and Range answer from the local store, and Delete resets both.
type Failover struct {
	redis  *Store
	local  policy.Store
	policy OnError
	log    *slog.Logger
	// OnSwitch, if set before use, is called once per switch (true: to
	// degraded) for metrics.
	OnSwitch func(degraded bool)
	// ProbeInterval is the pause between probes while degraded; zero
	// means 250ms.
	ProbeInterval time.Duration

	degraded   atomic.Bool
	since      atomic.Int64 // Unix ns of the last switch
	switches   atomic.Int64
	recoveries atomic.Int64
	lastErr    atomic.Pointer[string]

	mu      sync.Mutex
	touched map[[2]string]struct{}
	probing bool
	stop    chan struct{}
	// ctx is cancelled by Close, ending a recovery in progress.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewFailover returns a Failover over the Redis store r and the host's own
// store local, with policy p. log receives the switch and recovery lines.
func NewFailover(r *Store, local policy.Store, p OnError, log *slog.Logger) *Failover {
	ctx, cancel := context.WithCancel(context.Background())
	return &Failover{redis: r, local: local, policy: p, log: log, touched: map[[2]string]struct{}{}, stop: make(chan struct{}),
		ctx: ctx, cancel: cancel}
}

// FailoverStatus is the backend's state for `ratelimitd status`.
type FailoverStatus struct {
	Backend  string    `json:"backend"`
	OnError  string    `json:"on_redis_error"`
	Degraded bool      `json:"degraded"`
	Since    time.Time `json:"since,omitzero"`
	// Switches counts switches to degraded, Recoveries switches back.
	Switches   int64  `json:"switches"`
	Recoveries int64  `json:"recoveries"`
	LastError  string `json:"last_error,omitempty"`
	Cluster    bool   `json:"cluster"`
}

// Status reports the current state.
func (f *Failover) Status() FailoverStatus {
	st := FailoverStatus{Backend: "redis", OnError: f.policy.String(), Degraded: f.degraded.Load(),
		Switches: f.switches.Load(), Recoveries: f.recoveries.Load(), Cluster: f.redis.Cluster()}
	if ns := f.since.Load(); ns != 0 {
		st.Since = time.Unix(0, ns)
	}
	if e := f.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

// Degraded reports whether Redis is currently considered down.
func (f *Failover) Degraded() bool { return f.degraded.Load() }

// Close stops the probe.
func (f *Failover) Close() {
	f.mu.Lock()
	select {
	case <-f.stop:
	default:
		close(f.stop)
	}
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// EvaluateStack decides with Redis, or per the policy when Redis is down.
// With Dunno and Defer it returns an error wrapping ErrUnavailable (the
// caller answers DUNNO or 450 4.7.1).
func (f *Failover) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if !f.degraded.Load() {
		err := f.redis.EvaluateStack(ctx, now, items, refused, out)
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		f.down(err)
	}
	if f.policy != Local {
		return fmt.Errorf("%w: deciding per on_redis_error=%s", ErrUnavailable, f.policy)
	}
	err := policy.EvaluateStack(ctx, f.local, now.Add(f.redis.ClockOffset()), items, refused, out)
	f.mu.Lock()
	for i := range items {
		if out[i].Stored && len(f.touched) < maxTouched {
			f.touched[[2]string{items[i].Limit, items[i].Key}] = struct{}{}
		}
	}
	f.mu.Unlock()
	return err
}

// down switches to degraded (once) and starts the probe.
func (f *Failover) down(cause error) {
	msg := cause.Error()
	f.lastErr.Store(&msg)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.degraded.Load() {
		return
	}
	select {
	case <-f.stop:
		return
	default:
	}
	f.degraded.Store(true)
	f.since.Store(time.Now().UnixNano())
	f.switches.Add(1)
	f.log.Error("redis unavailable: rate state no longer shared", "on_redis_error", f.policy.String(), "err", cause)
	if f.OnSwitch != nil {
		f.OnSwitch(true)
	}
	if !f.probing {
		f.probing = true
		f.wg.Add(1)
		go f.probe()
	}
}

// probe pings Redis until it answers, then merges and switches back.
func (f *Failover) probe() {
	defer f.wg.Done()
	every := f.ProbeInterval
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
		}
		if _, err := f.redis.Ping(f.ctx); err != nil {
			continue
		}
		began := time.Unix(0, f.since.Load())
		pushed, err := f.recover()
		if err != nil {
			msg := err.Error()
			f.lastErr.Store(&msg)
			continue
		}
		f.log.Info("redis available again: rate state shared", "pushed_local_states", pushed,
			"outage", time.Since(began).Round(time.Millisecond).String())
		return
	}
}

// recover pushes the states decided locally and switches back to Redis.
func (f *Failover) recover() (int, error) {
	pushed := 0
	for range 8 {
		f.mu.Lock()
		batch := f.touched
		if len(batch) == 0 {
			f.degraded.Store(false)
			f.since.Store(time.Now().UnixNano())
			f.recoveries.Add(1)
			f.probing = false
			if f.OnSwitch != nil {
				f.OnSwitch(false)
			}
			f.mu.Unlock()
			return pushed, nil
		}
		f.touched = map[[2]string]struct{}{}
		f.mu.Unlock()
		n, err := f.push(batch)
		pushed += n
		if err != nil {
			f.mu.Lock()
			for k := range batch {
				f.touched[k] = struct{}{}
			}
			f.mu.Unlock()
			return pushed, err
		}
	}
	return pushed, errors.New("redisstore: local states kept changing during recovery")
}

func (f *Failover) push(batch map[[2]string]struct{}) (int, error) {
	byLimit := map[string][]string{}
	for k := range batch {
		byLimit[k[0]] = append(byLimit[k[0]], k[1])
	}
	ctx := f.ctx
	n := 0
	for limit, keys := range byLimit {
		sts := make([]ratelimit.State, len(keys))
		for i, k := range keys {
			st, err := f.local.Get(ctx, limit, k)
			if err != nil {
				return n, err
			}
			sts[i] = st
		}
		m, err := f.redis.Merge(ctx, limit, keys, sts)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Get returns the shared state, or the local one while Redis is down.
func (f *Failover) Get(ctx context.Context, limit, key string) (ratelimit.State, error) {
	st, err := f.redis.Get(ctx, limit, key)
	if err != nil && errors.Is(err, ErrUnavailable) && f.policy == Local {
		return f.local.Get(ctx, limit, key)
	}
	return st, err
}

// Update updates the shared state.
func (f *Failover) Update(ctx context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	return f.redis.Update(ctx, limit, key, fn)
}

// Delete resets key under limit in Redis (every host sees it at once) and
// in the local store; it reports whether either had state. A Redis error
// is returned after the local reset.
func (f *Failover) Delete(ctx context.Context, limit, key string) (bool, error) {
	lok, lerr := f.local.Delete(ctx, limit, key)
	ok, err := f.redis.Delete(ctx, limit, key)
	return ok || lok, errors.Join(err, lerr)
}

// Range walks the shared state, or the local one while Redis is down.
func (f *Failover) Range(ctx context.Context, fn func(limit, key string, s ratelimit.State) bool) error {
	if f.degraded.Load() && f.policy == Local {
		return f.local.Range(ctx, fn)
	}
	return f.redis.Range(ctx, fn)
}
