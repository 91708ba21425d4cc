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
	// Local decides with this host's own store, which holds a copy of
	// every state Redis returned (written through on each decision): a
	// sender is limited from what this host last knew of it, not from
	// zero. On recovery what the host counted during the outage is
	// added to the shared state, once.
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

// maxTouched bounds the (limit, key) pairs a Failover remembers counting
// locally during an outage; beyond it a new key's outage counts are not
// added to Redis on recovery (they still decide locally).
const maxTouched = 1 << 20

// Failover is the daemon's rate store with the Redis backend: the Redis
// Store while Redis answers, and OnError's policy while it does not. It
// implements policy.Store and policy.StackEvaluator and is safe for
// concurrent use.
//
// Every state a decision script returns is also written to the local
// store (write-through), so that the local store holds what this host
// last knew of each key. A request that Redis fails to answer within its
// timeout marks its shard down (the one Redis, or with a Redis Cluster
// the request's hash slot, widened by the probe to every slot of the
// node serving it) and is decided per OnError; later requests of a shard
// that is down do not wait for Redis. With Local they are decided with
// the local store (on the host's clock corrected by the offset to
// Redis's clock last measured), each request's cost multiplied by Hosts
// when Split is set, and what they count is also kept apart, counted
// from zero (the outage's delta).
//
// A probe reads from Redis every ProbeInterval (a read that a Redis
// still LOADING or BUSY refuses); as soon as it succeeds the shard is
// shared again, under load or not, and the shard's deltas are added to
// the shared state (Store.Merge) under a merge identifier, exactly once
// even if the merge is retried or the daemon restarts in between (the
// unmerged deltas are kept in PendingFile, see LoadPending). One switch
// to degraded and one back are logged and counted per outage, however
// many requests failed.
type Failover struct {
	redis  *Store
	local  policy.Store
	policy OnError
	log    *slog.Logger
	// OnSwitch, if set before use, is called once per switch (true: to
	// degraded) for metrics.
	OnSwitch func(degraded bool)
	// ProbeInterval is the pause between probes while degraded; zero
	// means 250ms. Set it through NewFailoverWith: the probe may run
	// from the start.
	ProbeInterval time.Duration
	// Split (degraded_share = "split") gives each of Hosts hosts a
	// share of every limit while degraded: local requests cost Hosts
	// times their cost, so that the hosts together admit about the
	// limit. Set both through NewFailoverWith.
	Split bool
	Hosts int

	// down[shard] is set while the shard is degraded: shard 0 for a
	// standalone or Sentinel-managed Redis, the hash slot with a
	// Cluster. nDown counts the shards down.
	down  [slotCount]atomic.Bool
	nDown atomic.Int32

	since      atomic.Int64 // Unix ns of the last switch
	switches   atomic.Int64
	recoveries atomic.Int64
	lastErr    atomic.Pointer[string]
	// degradedNs is the time spent degraded before the current outage.
	degradedNs atomic.Int64
	// Requests decided locally, by reason (see LocalDecisions).
	localOutage, localFailed atomic.Int64
	merges, merged           atomic.Int64

	// localMu is held shared by each local decision and exclusively by
	// a recovery, between marking its shards up and taking their deltas,
	// so that no local count is left behind.
	localMu sync.RWMutex

	mu      sync.Mutex
	delta   map[[2]string]*deltaEntry
	pending []pendingMerge
	// pendingFile, if set, keeps pending (LoadPending).
	pendingFile string
	// downNodes are the cluster nodes found down (address: since), for
	// logging each once.
	downNodes map[string]time.Time
	// outage is set from the first shard down to the last one up;
	// relapse when it began within relapseWindow of recovered, the end
	// of the previous one.
	outage    bool
	relapse   bool
	recovered time.Time
	probing   bool
	stop      chan struct{}
	// ctx is cancelled by Close, ending a recovery in progress.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// deltaEntry is what this host counted of one (limit, key) during an
// outage, counted from no state.
type deltaEntry struct {
	l    ratelimit.Limit
	st   ratelimit.State
	slot uint16
}

// NewFailover returns a Failover over the Redis store r and the host's own
// store local, with policy p. log receives the switch and recovery lines.
// When r is not connected yet (Open), the Failover starts degraded and
// its probe connects. It is NewFailoverWith with no options.
func NewFailover(r *Store, local policy.Store, p OnError, log *slog.Logger) *Failover {
	return NewFailoverWith(r, local, p, log, FailoverOptions{})
}

// FailoverOptions are the settings of a Failover that its probe reads,
// and so must be in place before it starts: NewFailoverWith sets them
// before the probe of a Redis not yet connected runs (setting the fields
// after NewFailover raced with it).
type FailoverOptions struct {
	// ProbeInterval, Split and Hosts set the Failover fields of the same
	// names.
	ProbeInterval time.Duration
	Split         bool
	Hosts         int
}

// NewFailoverWith is NewFailover with options o in place from the start.
func NewFailoverWith(r *Store, local policy.Store, p OnError, log *slog.Logger, o FailoverOptions) *Failover {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Failover{redis: r, local: local, policy: p, log: log, delta: map[[2]string]*deltaEntry{},
		downNodes: map[string]time.Time{}, stop: make(chan struct{}), ctx: ctx, cancel: cancel,
		ProbeInterval: o.ProbeInterval, Split: o.Split, Hosts: o.Hosts}
	if !r.Connected() {
		f.markAllDown(errNotConnected)
	}
	return f
}

// FailoverStatus is the backend's state for `ratelimitd status`.
type FailoverStatus struct {
	Backend  string    `json:"backend"`
	OnError  string    `json:"on_redis_error"`
	Degraded bool      `json:"degraded"`
	Since    time.Time `json:"since,omitzero"`
	// Switches counts switches to degraded, Recoveries switches back.
	Switches   int64 `json:"switches"`
	Recoveries int64 `json:"recoveries"`
	// LastError is the cause of the current outage (empty while shared).
	LastError string `json:"last_error,omitempty"`
	Cluster   bool   `json:"cluster"`
	// Connected is false until Redis was first reached.
	Connected bool `json:"connected"`
	// SlotsDown counts the shards degraded: with a Cluster the hash
	// slots, else 1 while degraded.
	SlotsDown int `json:"slots_down,omitempty"`
	// DegradedSeconds is the total time spent degraded.
	DegradedSeconds float64 `json:"degraded_seconds"`
	// LocalDecisions counts requests decided locally, by reason.
	LocalDecisions map[string]int64 `json:"local_decisions,omitempty"`
	// Merges counts completed merges of outage counts, StatesMerged the
	// states they added to; PendingMerges the merges still to do.
	Merges        int64 `json:"merges"`
	StatesMerged  int64 `json:"states_merged"`
	PendingMerges int   `json:"pending_merges,omitempty"`
	// ClockOffset is Redis's clock minus this host's.
	ClockOffset time.Duration `json:"clock_offset_ns"`
	// Share is "split" when degraded_share = "split", with Hosts.
	Share string `json:"degraded_share,omitempty"`
	Hosts int    `json:"hosts,omitempty"`
}

// Status reports the current state.
func (f *Failover) Status() FailoverStatus {
	n := int(f.nDown.Load())
	st := FailoverStatus{Backend: "redis", OnError: f.policy.String(), Degraded: n > 0,
		Switches: f.switches.Load(), Recoveries: f.recoveries.Load(), Cluster: f.redis.Cluster(),
		Connected: f.redis.Connected(), DegradedSeconds: f.DegradedTime().Seconds(),
		LocalDecisions: f.LocalDecisions(), Merges: f.merges.Load(), StatesMerged: f.merged.Load(),
		ClockOffset: f.redis.ClockOffset()}
	if n > 0 {
		st.SlotsDown = n
		if !f.redis.Cluster() {
			st.SlotsDown = 1
		}
		if e := f.lastErr.Load(); e != nil {
			st.LastError = *e
		}
	}
	if ns := f.since.Load(); ns != 0 {
		st.Since = time.Unix(0, ns)
	}
	if f.Split {
		st.Share, st.Hosts = "split", f.Hosts
	}
	f.mu.Lock()
	st.PendingMerges = len(f.pending)
	f.mu.Unlock()
	return st
}

// Degraded reports whether some of Redis (all of it, or some cluster
// slots) is currently considered down.
func (f *Failover) Degraded() bool { return f.nDown.Load() > 0 }

// DegradedTime is the total time spent degraded, the current outage
// included.
func (f *Failover) DegradedTime() time.Duration {
	d := time.Duration(f.degradedNs.Load())
	if f.Degraded() {
		if ns := f.since.Load(); ns != 0 {
			d += time.Since(time.Unix(0, ns))
		}
	}
	return d
}

// LocalDecisions counts the requests decided with the local store, by
// reason: "outage" (their shard was known down) and "failed" (their Redis
// call failed).
func (f *Failover) LocalDecisions() map[string]int64 {
	return map[string]int64{"outage": f.localOutage.Load(), "failed": f.localFailed.Load()}
}

// Merges returns how many merges of outage counts completed and how many
// states they added to.
func (f *Failover) Merges() (merges, states int64) { return f.merges.Load(), f.merged.Load() }

// FastPath is the Redis store's Store.FastPath.
func (f *Failover) FastPath() (confirmed, refused int64) { return f.redis.FastPath() }

// Close stops the probe. Counts of an outage still in progress are kept
// in the pending file (LoadPending), to be added when the daemon next
// reaches Redis.
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.delta) > 0 {
		f.pending = append(f.pending, f.takeDelta(nil))
	}
	f.savePending()
}

// EvaluateStack decides with Redis, or per the policy when Redis (the
// request's shard) is down. With Dunno and Defer it returns an error
// wrapping ErrUnavailable (the caller answers DUNNO or 450 4.7.1).
func (f *Failover) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if f.nDown.Load() == 0 || !f.anyDown(items) {
		err := f.redis.EvaluateStack(ctx, now, items, refused, out)
		if err == nil {
			f.writeThrough(ctx, items, refused, out)
			return nil
		}
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		f.markDown(items, err)
		if f.policy != Local {
			return err
		}
		f.localFailed.Add(1)
		return f.decideLocal(ctx, now, items, refused, out, true)
	}
	if f.policy != Local {
		return fmt.Errorf("%w: deciding per on_redis_error=%s", ErrUnavailable, f.policy)
	}
	f.localOutage.Add(1)
	return f.decideLocal(ctx, now, items, refused, out, false)
}

// shard is the shard of rate key key: its record's hash slot with a
// Cluster, else 0.
func (f *Failover) shard(key string) uint16 {
	if !f.redis.Cluster() {
		return 0
	}
	return Slot(f.redis.Key(key))
}

// anyDown reports whether any item's shard is down.
func (f *Failover) anyDown(items []policy.StackItem) bool {
	if !f.redis.Cluster() {
		return f.down[0].Load()
	}
	for i := range items {
		if f.down[f.shard(items[i].Key)].Load() {
			return true
		}
	}
	return false
}

// writeThrough copies the states Redis now holds for the items (their
// previous state, or the one the script stored) into the local store.
func (f *Failover) writeThrough(ctx context.Context, items []policy.StackItem, refused bool, out []policy.StackResult) {
	admitted := ratelimit.StackAdmits(refused, len(items), func(i int) bool {
		return out[i].Err == nil && out[i].Result.Over && items[i].Refuses
	})
	for i := range items {
		it, o := &items[i], &out[i]
		if o.Err != nil {
			continue
		}
		st := o.Prev
		if o.Stored {
			st, _ = it.Params.Next(o.Result, admitted)
		}
		if st.IsZero() {
			continue
		}
		f.local.Update(ctx, it.Limit, it.Key, func(old ratelimit.State) (ratelimit.State, bool) { return st, old != st })
	}
}

// decideLocal decides with the local store (its cost multiplied by Hosts
// with Split) and adds what it counted to the outage's delta. Unless
// force is set it rechecks, under localMu, that the request's shard is
// still down, and asks Redis if a recovery came first.
func (f *Failover) decideLocal(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult, force bool) error {
	f.localMu.RLock()
	if !force && !f.anyDown(items) {
		f.localMu.RUnlock()
		return f.EvaluateStack(ctx, now, items, refused, out)
	}
	defer f.localMu.RUnlock()
	now = now.Add(f.redis.ClockOffset())
	local := items
	if f.Split && f.Hosts > 1 {
		local = make([]policy.StackItem, len(items))
		for i, it := range items {
			it.Cost *= float64(f.Hosts)
			local[i] = it
		}
	}
	err := policy.EvaluateStack(ctx, f.local, now, local, refused, out)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range items {
		it := &items[i]
		if !out[i].Stored || out[i].Err != nil {
			continue
		}
		k := [2]string{it.Limit, it.Key}
		d := f.delta[k]
		if d == nil {
			if len(f.delta) >= maxTouched {
				continue
			}
			d = &deltaEntry{l: it.Params, slot: f.shard(it.Key)}
			f.delta[k] = d
		}
		d.l = it.Params
		d.st = it.Params.Check(d.st, now, it.Cost).Counted
	}
	return err
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

// Delete resets key under limit in Redis (every host sees it at once), in
// the local store and in the outage's counts; it reports whether Redis or
// the local store had state. A Redis error is returned after the local
// reset.
func (f *Failover) Delete(ctx context.Context, limit, key string) (bool, error) {
	f.mu.Lock()
	delete(f.delta, [2]string{limit, key})
	f.mu.Unlock()
	lok, lerr := f.local.Delete(ctx, limit, key)
	ok, err := f.redis.Delete(ctx, limit, key)
	return ok || lok, errors.Join(err, lerr)
}

// Range walks the shared state, or the local one while Redis is down.
func (f *Failover) Range(ctx context.Context, fn func(limit, key string, s ratelimit.State) bool) error {
	if f.Degraded() && f.policy == Local {
		return f.local.Range(ctx, fn)
	}
	return f.redis.Range(ctx, fn)
}

// Now is Redis's clock (Store.Now), for the `rate` commands.
func (f *Failover) Now(ctx context.Context) time.Time {
	if f.Degraded() {
		return time.Now().Add(f.redis.ClockOffset())
	}
	return f.redis.Now(ctx)
}
