package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// pendingMerge is one merge of outage counts: Store.Merge marker, deltas.
type pendingMerge struct {
	ID      string         `json:"id"`
	Entries []pendingEntry `json:"entries"`
	failed  bool           // a failure of it was logged
}

// pendingEntry is one (limit, key)'s delta (ratelimit.State).
type pendingEntry struct {
	Limit string  `json:"limit"`
	Key   string  `json:"key"`
	Time  int64   `json:"time"`
	Rate  float64 `json:"rate"`
}

// markDown marks the shards of items down after cause.
func (f *Failover) markDown(items []policy.StackItem, cause error) {
	f.markShards(cause, func(mark func(uint16)) {
		for i := range items {
			mark(f.shard(items[i].Key))
		}
	})
}

// markShards marks shards down; the first starts an outage and the probe.
func (f *Failover) markShards(cause error, each func(mark func(uint16))) {
	f.setErr(cause)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ctx.Err() != nil {
		return // closed
	}
	was := f.nDown.Load()
	each(func(s uint16) {
		if !f.down[s].Swap(true) {
			f.nDown.Add(1)
		}
	})
	if was == 0 && f.nDown.Load() > 0 && !f.outage {
		f.outage = true
		f.since.Store(time.Now().UnixNano())
		// A relapse soon after a recovery is not logged again.
		f.relapse = time.Since(f.recovered) < relapseWindow
		if !f.relapse {
			f.switches.Add(1)
			share := "last known state"
			if f.opts.Split && f.opts.Hosts > 1 {
				share = fmt.Sprintf("split among %d hosts", f.opts.Hosts)
			}
			f.log.Error("redis unavailable: rate state no longer shared", "on_redis_error", f.opts.OnError.String(),
				"share", share, "err", cause)
		}
	}
	f.startProbe()
}

// startProbe starts the probe unless it runs (f.mu held).
func (f *Failover) startProbe() {
	if f.probing {
		return
	}
	f.probing = true
	f.wg.Go(f.probe)
}

// probe runs while shards are down or merges pending, every ProbeInterval.
func (f *Failover) probe() {
	every := f.opts.ProbeInterval
	if every <= 0 {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		if f.nDown.Load() > 0 {
			f.probeShards()
		}
		f.mergePending(nil)
		f.mu.Lock()
		if f.nDown.Load() == 0 && len(f.pending) == 0 {
			f.probing = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// probeShards probes down shards; a silent node gets all its slots marked down.
func (f *Failover) probeShards() {
	r := f.redis
	if err := r.Connect(f.ctx); err != nil {
		return
	}
	var owners *[slotCount]string // nil without a Cluster
	if r.Cluster() {
		var err error
		if owners, err = r.slotOwners(f.ctx); err != nil {
			f.setErr(err)
			return
		}
	}
	groups := map[string][]uint16{}
	for s := range slotCount {
		if f.down[s].Load() {
			node := ""
			if owners != nil {
				node = owners[s]
			}
			groups[node] = append(groups[node], uint16(s))
		}
	}
	for node, slots := range groups {
		if owners != nil && node == "" {
			continue // no master serves these slots: they stay local
		}
		if err := r.probeSlot(f.ctx, slots[0]); err != nil {
			f.setErr(err)
			if owners != nil {
				f.widen(node, owners, err)
			}
			continue
		}
		f.recover(slots, node)
	}
}

func (f *Failover) setErr(err error) {
	msg := err.Error()
	f.lastErr.Store(&msg)
}

// widen marks every slot of node down, logging the node once.
func (f *Failover) widen(node string, owners *[slotCount]string, cause error) {
	f.mu.Lock()
	if _, ok := f.downNodes[node]; !ok {
		f.downNodes[node] = time.Now()
		f.log.Error("redis cluster node unavailable: its slots decided locally", "node", node, "err", cause)
	}
	f.mu.Unlock()
	f.markShards(cause, func(mark func(uint16)) {
		for s := range slotCount {
			if owners[s] == node {
				mark(uint16(s))
			}
		}
	})
}

// recover marks slots up, waits for local decisions in progress, takes
// their deltas and merges. The last shard up ends the outage.
func (f *Failover) recover(slots []uint16, node string) {
	in := func(uint16) bool { return true }
	if f.redis.Cluster() && len(slots) < slotCount {
		set := make(map[uint16]bool, len(slots))
		for _, s := range slots {
			set[s] = true
		}
		in = func(s uint16) bool { return set[s] }
	}
	// What this host counted while the shards were down is added first,
	// while they are still down: shared before the merge landed, Redis
	// would decide without the outage's counts and admit a sender at its
	// limit again until it did.
	f.mu.Lock()
	if pm := f.takeDelta(in); len(pm.Entries) > 0 {
		f.pending = append(f.pending, pm)
		f.savePending()
	}
	f.mu.Unlock()
	// A few tries: after a restart each of rueidis's pipelined
	// connections fails once (EOF) before it is replaced.
	var before int
	for try := 0; ; try++ {
		n, failed := f.mergePending(func(s uint16) bool { return in(s) || !f.down[s].Load() })
		before += n
		if !failed {
			break
		}
		if try == 3 {
			return // Redis failing again: the shards stay down
		}
	}
	f.mu.Lock()
	// The outage ends before its last shard is marked up.
	up := 0
	for _, s := range slots {
		if f.down[s].Load() {
			up++
		}
	}
	if f.outage && int(f.nDown.Load()) == up {
		f.outage = false
		began := time.Unix(0, f.since.Load())
		f.degradedNs.Add(int64(time.Since(began)))
		f.since.Store(time.Now().UnixNano())
		f.recovered = time.Now()
		if !f.relapse {
			f.recoveries.Add(1)
			f.log.Info("redis available again: rate state shared", "outage", time.Since(began).Round(time.Millisecond).String())
		}
	}
	for _, s := range slots {
		if f.down[s].Swap(false) {
			f.nDown.Add(-1)
		}
	}
	f.mu.Unlock()
	f.localMu.Lock()
	//lint:ignore SA2001 a barrier: every local decision begun before the shards came up has recorded its counts
	f.localMu.Unlock()
	// The counts of the requests decided locally during the first merge.
	f.mu.Lock()
	pm := f.takeDelta(in)
	if len(pm.Entries) > 0 {
		f.pending = append(f.pending, pm)
		f.savePending()
	}
	delete(f.downNodes, node)
	f.mu.Unlock()
	after, _ := f.mergePending(nil)
	if before+after > 0 {
		f.log.Info("outage counts added to redis", "states", before+after)
	}
}

// relapseWindow is how soon after a recovery a failure continues the outage.
const relapseWindow = 2 * time.Second

// takeDelta moves shards in's deltas (nil: all) to a pendingMerge (f.mu held).
func (f *Failover) takeDelta(in func(uint16) bool) pendingMerge {
	pm := pendingMerge{ID: newMergeID()}
	for k, d := range f.delta {
		if in != nil && !in(d.slot) {
			continue
		}
		delete(f.delta, k)
		pm.Entries = append(pm.Entries, pendingEntry{Limit: k[0], Key: k[1], Time: d.st.Time, Rate: d.st.Rate})
	}
	return pm
}

func newMergeID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// mergePending does the pending merges whose shards are up (or, if
// mergeable is not nil, those it accepts) and returns the states added and
// whether one failed; failed ones stay pending.
func (f *Failover) mergePending(mergeable func(shard uint16) bool) (total int, failed bool) {
	f.mu.Lock()
	todo := append([]pendingMerge(nil), f.pending...)
	f.mu.Unlock()
	for _, pm := range todo {
		n, err := f.merge(f.ctx, pm, mergeable)
		failed = failed || err != nil && !errors.Is(err, errShardDown)
		total += n
		f.merged.Add(int64(n))
		f.mu.Lock()
		i := slices.IndexFunc(f.pending, func(p pendingMerge) bool { return p.ID == pm.ID })
		switch {
		case i < 0:
		case err == nil:
			f.pending = slices.Delete(f.pending, i, i+1)
			f.merges.Add(1)
		case !f.pending[i].failed:
			f.pending[i].failed = true
			f.log.Warn("merge of outage counts into redis failed; retrying", "merge", pm.ID, "err", err)
		}
		f.savePending()
		f.mu.Unlock()
	}
	return total, failed
}

// errShardDown is merge's error for entries left for later: their shard is down.
var errShardDown = fmt.Errorf("%w: shard still down", ErrUnavailable)

// merge adds pm's deltas of shards up (or that mergeable accepts), per
// limit; others give an error.
func (f *Failover) merge(ctx context.Context, pm pendingMerge, mergeable func(shard uint16) bool) (int, error) {
	if mergeable == nil {
		mergeable = func(s uint16) bool { return !f.down[s].Load() }
	}
	byLimit := map[string][]int{}
	var later error
	for i, e := range pm.Entries {
		if !mergeable(f.shard(e.Key)) {
			later = errShardDown
			continue
		}
		byLimit[e.Limit] = append(byLimit[e.Limit], i)
	}
	n := 0
	for _, limit := range slices.Sorted(maps.Keys(byLimit)) {
		idx := byLimit[limit]
		keys := make([]string, len(idx))
		sts := make([]ratelimit.State, len(idx))
		for j, i := range idx {
			keys[j], sts[j] = pm.Entries[i].Key, ratelimit.State{Time: pm.Entries[i].Time, Rate: pm.Entries[i].Rate}
		}
		m, err := f.redis.Merge(ctx, pm.ID, limit, keys, sts)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, later
}

// LoadPending sets path as the JSON file of unmerged outage counts and
// loads what a previous run left. Call it once, before use.
func (f *Failover) LoadPending(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pendingFile = path
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var pms []pendingMerge
	if err := json.Unmarshal(b, &pms); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	f.pending = append(f.pending, pms...)
	if len(f.pending) > 0 {
		f.startProbe()
	}
	return nil
}

// savePending writes (by rename) or removes the pending file (f.mu held).
func (f *Failover) savePending() {
	if f.pendingFile == "" {
		return
	}
	if len(f.pending) == 0 {
		if err := os.Remove(f.pendingFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.log.Warn("outage counts file not removed", "file", f.pendingFile, "err", err)
		}
		return
	}
	b, err := json.Marshal(f.pending)
	if err == nil {
		tmp := filepath.Join(filepath.Dir(f.pendingFile), "."+filepath.Base(f.pendingFile)+".tmp")
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, f.pendingFile)
		}
	}
	if err != nil {
		f.log.Warn("outage counts not saved", "file", f.pendingFile, "err", err)
	}
}
