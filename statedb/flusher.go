package statedb

import (
	"context"
	"log/slog"
	"time"
)

// Flusher is the one write-behind loop of the stores that share a state
// file: every interval it calls their flushes in the order added, and a
// last time when Run's context is done. A flush that fails keeps its
// changes for the next; Flusher logs its error and passes it to onError.
// Add before Run.
type Flusher struct {
	interval time.Duration
	log      *slog.Logger
	onError  func(name string, err error)
	flushes  []namedFlush
}

type namedFlush struct {
	name  string
	flush func() error
}

// NewFlusher returns a Flusher with the given interval (> 0); log (nil:
// discard) and onError (may be nil) receive failed flushes.
func NewFlusher(interval time.Duration, log *slog.Logger, onError func(name string, err error)) *Flusher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Flusher{interval: interval, log: log, onError: onError}
}

// Add registers flush under name (for the log and onError).
func (f *Flusher) Add(name string, flush func() error) {
	f.flushes = append(f.flushes, namedFlush{name, flush})
}

// Run flushes every interval until ctx is done, then flushes a last time
// and returns. Call it once.
func (f *Flusher) Run(ctx context.Context) {
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.Flush()
			return
		case <-t.C:
			f.Flush()
		}
	}
}

// Flush calls every flush once, in order.
func (f *Flusher) Flush() {
	for _, fl := range f.flushes {
		if err := fl.flush(); err != nil {
			f.log.Error(fl.name+" flush failed, will retry", "err", err)
			if f.onError != nil {
				f.onError(fl.name, err)
			}
		}
	}
}
