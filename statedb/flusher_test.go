package statedb

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestFlusher: every flush runs at each tick and once more when Run's
// context is done; a failed one is passed to onError with its name.
func TestFlusher(t *testing.T) {
	var a, b atomic.Int64
	var failed atomic.Value
	f := NewFlusher(time.Millisecond, nil, func(name string, err error) { failed.Store(name + ": " + err.Error()) })
	f.Add("a", func() error { a.Add(1); return nil })
	f.Add("b", func() error { b.Add(1); return errors.New("disk full") })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	for a.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	n := a.Load()
	if b.Load() != n {
		t.Errorf("a flushed %d times, b %d", n, b.Load())
	}
	if got, _ := failed.Load().(string); got != "b: disk full" {
		t.Errorf("onError got %q", got)
	}
	time.Sleep(5 * time.Millisecond)
	if a.Load() != n {
		t.Error("flushed after Run returned")
	}
}
