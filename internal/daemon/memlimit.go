package daemon

import (
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// Soft memory limit (startMemoryLimit).
const (
	// memoryHeadroom is the heap the limit leaves above what the daemon
	// is known to hold: the garbage collector runs about once per this
	// many bytes allocated.
	memoryHeadroom = 32 << 20
	// memoryFloor is the least limit set.
	memoryFloor = 128 << 20
	// The memory freed is given back to the system (debug.FreeOSMemory,
	// a collection) when the flush and compaction buffers
	// (ratestore.Persistent.Working) shrink from one tick to the next by
	// releaseDrop (a compaction ended) or from releaseQuiet or more to
	// nothing (the load stopped: a flush found nothing to write); at most
	// once per releaseEvery, a release that comes sooner waiting for it.
	releaseDrop  = 16 << 20
	releaseQuiet = 1 << 20
	releaseEvery = 2 * time.Second
)

// shouldRelease reports whether the flush and compaction buffers going
// from last to working bytes in one tick calls for giving the memory back
// to the system (see releaseDrop).
func shouldRelease(last, working int64) bool {
	return last-working >= releaseDrop || (working == 0 && last >= releaseQuiet)
}

// releaser decides, tick by tick, when the daemon gives freed memory back
// to the system (see releaseDrop). The zero value starts with no buffers
// and no release made.
type releaser struct {
	last     int64     // the buffers' bytes at the last tick
	due      bool      // a release waits for releaseEvery to pass
	released time.Time // the last release
}

// tick records the buffers' size working (bytes) at now and reports
// whether to release now.
func (r *releaser) tick(now time.Time, working int64) bool {
	r.due = r.due || shouldRelease(r.last, working)
	r.last = working
	if !r.due || now.Sub(r.released) < releaseEvery {
		return false
	}
	r.due, r.released = false, now
	return true
}

// memoryLimit is the soft memory limit startMemoryLimit sets, in bytes:
// what the daemon holds on the Go heap plus memoryHeadroom, at least
// memoryFloor; and the flush and compaction buffers' part of it (bytes,
// ratestore.Persistent.Working). It never fails. What it holds is the
// larger of what it is known to hold (knownHeap), which follows a growing
// store at once, and the heap the last collection found live, which covers
// what knownHeap misses (BoltDB's transactions, a compaction's other
// buffers).
func (d *Daemon) memoryLimit() (limit, working int64) {
	known, working := d.knownHeap()
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(live)
	if live[0].Value.Kind() == rtmetrics.KindUint64 {
		known = max(known, int64(live[0].Value.Uint64()))
	}
	return max(known+memoryHeadroom, memoryFloor), working
}

// knownHeap returns the Go heap the daemon is known to hold, in bytes: the
// rate store, the per-message bookkeeping and the state file's flush and
// compaction buffers; and those buffers' part of it.
func (d *Daemon) knownHeap() (known, working int64) {
	working = d.state.Working()
	return d.mem.Footprint() + d.engine.Footprint() + working, working
}

// startMemoryLimit keeps the Go heap near what the daemon holds: every
// second the soft memory limit is set to memoryLimit, so garbage from
// flushes is collected before the heap doubles (GOGC's default), while the
// limit stays above the live heap (below it the collector runs back to
// back). When a compaction ends or the load stops (shouldRelease), the
// memory is given back to the system at once (debug.FreeOSMemory) rather
// than by the runtime's background scavenger, so that the resident size of
// a quiet daemon is what it holds. Setting GOMEMLIMIT in the environment
// turns this off.
func (d *Daemon) startMemoryLimit() {
	// The restore's buffers are garbage by now: give them back before
	// the first request (docs/performance.md has the resident sizes).
	debug.FreeOSMemory()
	limit, working := d.memoryLimit()
	debug.SetMemoryLimit(limit)
	rel := releaser{last: working, released: time.Now()}
	stop := make(chan struct{})
	d.stopMemLimit = func() { close(stop) }
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				limit, working := d.memoryLimit()
				debug.SetMemoryLimit(limit)
				if rel.tick(now, working) {
					debug.FreeOSMemory()
				}
			}
		}
	}()
}
