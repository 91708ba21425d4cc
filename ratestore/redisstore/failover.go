package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// OnError is what a Failover does while Redis is down (on_redis_error).
type OnError uint8

const (
	// Local decides with this host's store; its counts are merged once.
	Local OnError = iota
	// Dunno answers DUNNO (fail open).
	Dunno
	// Defer answers 450 4.7.1.
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

// ParseOnError parses "local", "dunno" or "defer"; else the error wraps ErrConfig.
func ParseOnError(s string) (OnError, error) {
	if i := slices.Index(onErrorNames[:], s); i >= 0 {
		return OnError(i), nil
	}
	return 0, fmt.Errorf("%w: on_redis_error %q (want local, dunno or defer)", ErrConfig, s)
}

// maxTouched bounds the (limit, key) deltas kept for the merge.
const maxTouched = 1 << 20

// Failover is the daemon's rate store: the Store while Redis answers,
// OnError's policy while it does not. It implements policy.Store and
// policy.StackEvaluator and is safe for concurrent use.
//
// States Redis returns are written through locally. A failed request
// marks its shard (slot, or 0) down; with Local those are decided locally,
// counts kept as deltas, until the probe recovers the shard and merges
// them once (Store.Merge, LoadPending).
type Failover struct {
	redis *Store
	local policy.Store
	log   *slog.Logger
	opts  FailoverOptions

	// down[shard] is set while the shard is degraded.
	down  [slotCount]atomic.Bool
	nDown atomic.Int32

	since      atomic.Int64 // Unix ns of the last switch
	switches   atomic.Int64
	recoveries atomic.Int64
	lastErr    atomic.Pointer[string]
	degradedNs atomic.Int64 // before the current outage
	// Requests decided locally, by reason (LocalDecisions).
	localOutage, localFailed atomic.Int64
	merges, merged           atomic.Int64
	restored                 atomic.Int64 // states Redis lost, restored from local copies

	// localMu is held shared by local decisions, exclusively by recovery.
	localMu sync.RWMutex

	mu             sync.Mutex
	delta          map[[2]string]*deltaEntry
	restoring      map[[2]string]chan struct{} // closed once restored (writeThrough)
	restoringAll   atomic.Bool                 // restoreAll runs
	lastRestoreAll atomic.Int64                // when it last started, Unix ns
	pending        []pendingMerge
	pendingFile    string               // keeps pending (LoadPending)
	downNodes      map[string]time.Time // Cluster nodes found down, logged once
	// outage spans first shard down to last up; relapse if it began
	// within relapseWindow of recovered.
	outage    bool
	relapse   bool
	recovered time.Time
	probing   bool
	ctx       context.Context // cancelled by Close, under mu
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// slotCount is the number of Redis Cluster hash slots.
const slotCount = 16384

// deltaEntry is one (limit, key)'s count during an outage, from none.
type deltaEntry struct {
	st   ratelimit.State
	slot uint16
}

// FailoverOptions configures NewFailover.
type FailoverOptions struct {
	OnError OnError
	// ProbeInterval is the pause between probes; zero means 250ms.
	ProbeInterval time.Duration
	// Split (degraded_share = "split"): while degraded local requests
	// cost Hosts times their cost.
	Split bool
	Hosts int
}

// NewFailover returns a Failover over r and local, degraded if unconnected.
func NewFailover(r *Store, local policy.Store, log *slog.Logger, o FailoverOptions) *Failover {
	ctx, cancel := context.WithCancel(context.Background())
	f := &Failover{redis: r, local: local, log: log, opts: o, delta: map[[2]string]*deltaEntry{},
		restoring: map[[2]string]chan struct{}{},
		downNodes: map[string]time.Time{}, ctx: ctx, cancel: cancel}
	if !r.Connected() { // every shard down until Redis is reached
		f.markShards(errNotConnected, func(mark func(uint16)) {
			for s := range slotCount {
				mark(uint16(s))
			}
		})
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
	// SlotsDown counts the hash slots degraded (1 without a Cluster).
	SlotsDown int `json:"slots_down,omitempty"`
	// DegradedSeconds is the total time spent degraded.
	DegradedSeconds float64 `json:"degraded_seconds"`
	// LocalDecisions counts requests decided locally, by reason.
	LocalDecisions map[string]int64 `json:"local_decisions,omitempty"`
	// Merges and StatesMerged count merges done and states added;
	// PendingMerges those still to do.
	Merges        int64 `json:"merges"`
	StatesMerged  int64 `json:"states_merged"`
	PendingMerges int   `json:"pending_merges,omitempty"`
	// StatesRestored counts states Redis no longer had (FLUSHALL, a
	// restart without persistence, eviction) restored from this host's copy.
	StatesRestored int64 `json:"states_restored,omitempty"`
	// ClockOffset is Redis's clock minus this host's.
	ClockOffset time.Duration `json:"clock_offset_ns"`
	// Share is "split" when degraded_share = "split", with Hosts.
	Share string `json:"degraded_share,omitempty"`
	Hosts int    `json:"hosts,omitempty"`
}

// Status reports the current state.
func (f *Failover) Status() FailoverStatus {
	n := int(f.nDown.Load())
	st := FailoverStatus{Backend: "redis", OnError: f.opts.OnError.String(), Degraded: n > 0,
		Switches: f.switches.Load(), Recoveries: f.recoveries.Load(), Cluster: f.redis.Cluster(),
		Connected: f.redis.Connected(), DegradedSeconds: f.DegradedTime().Seconds(),
		LocalDecisions: f.LocalDecisions(), Merges: f.merges.Load(), StatesMerged: f.merged.Load(),
		StatesRestored: f.restored.Load(), ClockOffset: f.redis.ClockOffset()}
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
	if f.opts.Split {
		st.Share, st.Hosts = "split", f.opts.Hosts
	}
	f.mu.Lock()
	st.PendingMerges = len(f.pending)
	f.mu.Unlock()
	return st
}

// Degraded reports whether some of Redis is considered down.
func (f *Failover) Degraded() bool { return f.nDown.Load() > 0 }

// DegradedTime is the total time spent degraded, current outage included.
func (f *Failover) DegradedTime() time.Duration {
	d := time.Duration(f.degradedNs.Load())
	if f.Degraded() {
		if ns := f.since.Load(); ns != 0 {
			d += time.Since(time.Unix(0, ns))
		}
	}
	return d
}

// LocalDecisions counts local decisions by reason: "outage" or "failed".
func (f *Failover) LocalDecisions() map[string]int64 {
	return map[string]int64{"outage": f.localOutage.Load(), "failed": f.localFailed.Load()}
}

// Merges returns the merges done and the states they added.
func (f *Failover) Merges() (merges, states int64) { return f.merges.Load(), f.merged.Load() }

// FastPath is the Redis store's Store.FastPath.
func (f *Failover) FastPath() (confirmed, refused int64) { return f.redis.FastPath() }

// Close stops the probe; an outage's counts stay in the pending file.
func (f *Failover) Close() {
	f.mu.Lock()
	f.cancel() // under mu: markShards starts no probe after it
	f.mu.Unlock()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.delta) > 0 {
		f.pending = append(f.pending, f.takeDelta(nil))
	}
	f.savePending()
}

// EvaluateStack decides with Redis, or per OnError while a shard is down.
func (f *Failover) EvaluateStack(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult) error {
	if f.nDown.Load() == 0 || !f.anyDown(items) {
		asked := time.Now().Add(f.redis.ClockOffset()).UnixNano()
		err := f.redis.EvaluateStack(ctx, now, items, refused, out)
		if err == nil {
			f.writeThrough(ctx, asked, items, refused, out)
			return nil
		}
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		f.markDown(items, err)
		if f.opts.OnError != Local {
			return err
		}
		f.localFailed.Add(1)
		return f.decideLocal(ctx, now, items, refused, out, true)
	}
	if f.opts.OnError != Local {
		return fmt.Errorf("%w: deciding per on_redis_error=%s", ErrUnavailable, f.opts.OnError)
	}
	f.localOutage.Add(1)
	return f.decideLocal(ctx, now, items, refused, out, false)
}

// shard is key's record's hash slot with a Cluster, else 0.
func (f *Failover) shard(key string) uint16 {
	if !f.redis.Cluster() {
		return 0
	}
	return Slot(f.redis.Key(key))
}

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

// writeThrough copies the states Redis returned into the local store. A
// state Redis lost (FLUSHALL, a restart without persistence, eviction) or
// holds more than a message below this host's live copy (lost, then
// counted again from less: another host restored an older copy) is
// restored from the copy; the message just decided got through. A copy
// written since asked (Unix ns, Redis's clock), by a request for the same
// key decided after this one, is newer than this answer: kept, and no loss.
func (f *Failover) writeThrough(ctx context.Context, asked int64, items []policy.StackItem, refused bool, out []policy.StackResult) {
	admitted := ratelimit.StackAdmits(refused, len(items), func(i int) bool {
		return out[i].Err == nil && out[i].Result.Over && items[i].Refuses
	})
	now := time.Now().Add(f.redis.ClockOffset())
	var lost []pendingEntry
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
		f.local.Update(ctx, it.Limit, it.Key, func(old ratelimit.State) (ratelimit.State, bool) {
			if old.Time >= asked { // no loss: keep the newer
				if st.Time > old.Time {
					return st, true
				}
				return old, false
			}
			add, ok := lostPart(it.Params, old, o.Prev, o.Result.Before, it.Cost, now)
			if !ok {
				return st, old != st
			}
			// The copy stands until Redis answers with it restored.
			lost = append(lost, pendingEntry{Limit: it.Limit, Key: it.Key, Time: add.Time, Rate: add.Rate})
			return old, false
		})
	}
	if len(lost) == 0 {
		return
	}
	f.mu.Lock()
	// While an outage's counts are unmerged, a copy may hold them (scaled,
	// with split): the merge, not a restore, adds them.
	if len(f.pending) > 0 || len(f.delta) > 0 {
		f.mu.Unlock()
		return
	}
	if f.ctx.Err() != nil { // closed: kept for the next run
		f.pending = append(f.pending, pendingMerge{ID: newMergeID(), Entries: lost})
		f.savePending()
		f.mu.Unlock()
		return
	}
	f.restoreAll()
	var waits []chan struct{}
	pm := pendingMerge{ID: newMergeID()}
	done := make(chan struct{})
	for _, e := range lost {
		k := [2]string{e.Limit, e.Key}
		if c, ok := f.restoring[k]; ok {
			waits = append(waits, c) // restored by an earlier request
			continue
		}
		f.restoring[k] = done
		pm.Entries = append(pm.Entries, e)
	}
	if len(pm.Entries) > 0 {
		waits = append(waits, done)
		f.wg.Add(1) // under mu: Close cancels under mu, then waits
		go func() {
			defer f.wg.Done()
			f.restore(pm)
			f.mu.Lock()
			for _, e := range pm.Entries {
				delete(f.restoring, [2]string{e.Limit, e.Key})
			}
			f.mu.Unlock()
			close(done)
		}()
	}
	f.mu.Unlock()
	// The answer waits for the restore, so that the sender's next message
	// sees it, but not long: just after a restart rueidis may hold a call
	// on its new connection's dial past any context.
	t := time.NewTimer(restoreWait)
	defer t.Stop()
	for _, c := range waits {
		select {
		case <-c:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// lostPart returns what to add to Redis's state prev of limit l (zero:
// none; before: its rate at now) to make it this host's live copy mine
// again, or false if Redis holds no less than a message (cost) below it.
func lostPart(l ratelimit.Limit, mine, prev ratelimit.State, before, cost float64, now time.Time) (ratelimit.State, bool) {
	if mine.IsZero() || expiryOf(l, mine) <= now.UnixMilli() {
		return ratelimit.State{}, false
	}
	m := l.Check(mine, now, 0).Before
	switch {
	case prev.IsZero():
		return mine, true
	case m <= before+max(cost, 1):
		return ratelimit.State{}, false
	case l.Algorithm == ratelimit.Exponential:
		return ratelimit.State{Time: now.UnixNano(), Rate: m - before}, true // decayed rates add up
	}
	return mine, true
}

// restoreAll restores in the background, at most once a second, every
// state this host holds a live copy of and Redis lacks or holds lower
// (lostPart): one state lost is most often all of them (FLUSHALL, a
// restart without persistence), and restored at once they need not wait
// for their senders' next message through this host, which another
// host's older copy would admit meanwhile. A state a request restores
// meanwhile may be added twice (stricter). Called with f.mu held.
func (f *Failover) restoreAll() {
	now := time.Now().UnixNano()
	if now-f.lastRestoreAll.Load() < int64(time.Second) || !f.restoringAll.CompareAndSwap(false, true) {
		return
	}
	f.lastRestoreAll.Store(now)
	f.wg.Go(func() {
		defer f.restoringAll.Store(false)
		var copies []pendingEntry
		f.local.Range(f.ctx, func(limit, key string, st ratelimit.State) bool {
			copies = append(copies, pendingEntry{Limit: limit, Key: key, Time: st.Time, Rate: st.Rate})
			return f.ctx.Err() == nil
		})
		for chunk := range slices.Chunk(copies, 512) {
			recs, err := f.redis.records(f.ctx, chunk)
			if err != nil {
				return
			}
			now := time.Now().Add(f.redis.ClockOffset())
			pm := pendingMerge{ID: newMergeID()}
			for _, c := range chunk {
				l, known := f.redis.limit(c.Limit)
				prev, err := decode(recordState(recs[c.Key], c.Limit))
				if !known || err != nil {
					continue
				}
				if add, ok := lostPart(l, ratelimit.State{Time: c.Time, Rate: c.Rate}, prev, l.Check(prev, now, 0).Before, 1, now); ok {
					pm.Entries = append(pm.Entries, pendingEntry{Limit: c.Limit, Key: c.Key, Time: add.Time, Rate: add.Rate})
				}
			}
			ctx, cancel := context.WithTimeout(f.ctx, f.redis.opts.Timeout)
			n, _ := f.merge(ctx, pm, nil)
			cancel()
			f.restored.Add(int64(n))
		}
	})
}

// restoreWait bounds a request's wait for the restore of a lost state.
const restoreWait = 50 * time.Millisecond

// restore adds pm, this host's copies of states Redis lost, to Redis now,
// or later with the outage merges if Redis does not answer.
func (f *Failover) restore(pm pendingMerge) {
	f.restored.Add(int64(len(pm.Entries)))
	ctx, cancel := context.WithTimeout(f.ctx, f.redis.opts.Timeout)
	defer cancel()
	if _, err := f.merge(ctx, pm, nil); err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pending = append(f.pending, pm)
	f.savePending()
	if f.ctx.Err() == nil { // not closed
		f.startProbe()
	}
}

// decideLocal decides locally and adds the counts to the outage's delta;
// unless force, it asks Redis instead if a recovery came first.
func (f *Failover) decideLocal(ctx context.Context, now time.Time, items []policy.StackItem, refused bool, out []policy.StackResult, force bool) error {
	f.localMu.RLock()
	if !force && !f.anyDown(items) {
		f.localMu.RUnlock()
		return f.EvaluateStack(ctx, now, items, refused, out)
	}
	defer f.localMu.RUnlock()
	now = now.Add(f.redis.ClockOffset())
	local := items
	if f.opts.Split && f.opts.Hosts > 1 {
		local = make([]policy.StackItem, len(items))
		for i, it := range items {
			it.Cost *= float64(f.opts.Hosts)
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
			d = &deltaEntry{slot: f.shard(it.Key)}
			f.delta[k] = d
		}
		d.st = it.Params.Check(d.st, now, it.Cost).Counted
	}
	return err
}

// Get returns the shared state, or the local one while Redis is down.
func (f *Failover) Get(ctx context.Context, limit, key string) (ratelimit.State, error) {
	st, err := f.redis.Get(ctx, limit, key)
	if err != nil && errors.Is(err, ErrUnavailable) && f.opts.OnError == Local {
		return f.local.Get(ctx, limit, key)
	}
	return st, err
}

// Update updates the shared state.
func (f *Failover) Update(ctx context.Context, limit, key string, fn func(ratelimit.State) (ratelimit.State, bool)) error {
	return f.redis.Update(ctx, limit, key, fn)
}

// Delete resets key under limit in Redis, locally and in the deltas, and
// reports whether either store had state.
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
	if f.Degraded() && f.opts.OnError == Local {
		return f.local.Range(ctx, fn)
	}
	return f.redis.Range(ctx, fn)
}

// RedisTime is Store.RedisTime, without asking Redis while degraded.
func (f *Failover) RedisTime(ctx context.Context) time.Time {
	if f.Degraded() {
		return time.Now().Add(f.redis.ClockOffset())
	}
	return f.redis.RedisTime(ctx)
}
