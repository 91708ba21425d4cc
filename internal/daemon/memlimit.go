package daemon

import (
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// Soft memory limit (startMemoryLimit): the heap held plus
// memoryHeadroom, at least memoryFloor. Freed memory is given back when the
// flush and compaction buffers shrink by releaseDrop, or from releaseQuiet
// to nothing; at most once per releaseEvery.
const (
	memoryHeadroom = 32 << 20
	memoryFloor    = 128 << 20
	releaseDrop    = 16 << 20
	releaseQuiet   = 1 << 20
	releaseEvery   = 2 * time.Second
)

// shouldRelease reports whether the buffers going from last to working
// bytes calls for giving memory back.
func shouldRelease(last, working int64) bool {
	return last-working >= releaseDrop || (working == 0 && last >= releaseQuiet)
}

// releaser decides tick by tick when freed memory goes back to the system.
type releaser struct {
	last     int64     // the buffers' bytes at the last tick
	due      bool      // a release waits for releaseEvery to pass
	released time.Time // the last release
}

// tick records the buffers' size at now and reports whether to release.
func (r *releaser) tick(now time.Time, working int64) bool {
	r.due = r.due || shouldRelease(r.last, working)
	r.last = working
	if !r.due || now.Sub(r.released) < releaseEvery {
		return false
	}
	r.due, r.released = false, now
	return true
}

// memoryLimit is the soft memory limit in bytes (the larger of knownHeap
// and the live heap, plus the headroom), and the buffers' part.
func (d *Daemon) memoryLimit() (limit, working int64) {
	known, working := d.knownHeap()
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	rtmetrics.Read(live)
	if live[0].Value.Kind() == rtmetrics.KindUint64 {
		known = max(known, int64(live[0].Value.Uint64()))
	}
	return max(known+memoryHeadroom, memoryFloor), working
}

// knownHeap returns the heap known held (rate store, message table, flush
// buffers), in bytes, and the buffers' part of it.
func (d *Daemon) knownHeap() (known, working int64) {
	working = d.state.Working()
	return d.mem.Footprint() + d.engine.Footprint() + working, working
}

// startMemoryLimit sets the soft memory limit every second, so flush
// garbage is collected before the heap doubles, and returns freed memory
// when a compaction ends or the load stops. GOMEMLIMIT turns it off.
func (d *Daemon) startMemoryLimit() {
	debug.FreeOSMemory() // the restore's buffers
	limit, working := d.memoryLimit()
	debug.SetMemoryLimit(limit)
	rel := releaser{last: working, released: time.Now()}
	stop := make(chan struct{})
	d.stopMemLimit = func() { close(stop) }
	d.wg.Go(func() {
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
	})
}
