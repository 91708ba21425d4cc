package ratestore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// TestMain runs the child processes of TestPersistentCrashBound and
// BenchmarkPersist2M when the test binary is re-executed for them.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(path) // never returns
	}
	if path := os.Getenv(rssEnv); path != "" {
		rssChild(path)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// flushEvery runs a statedb.Flusher of ticks every interval, its errors
// passed to onError (may be nil), until stop, which returns after its
// last flush.
func flushEvery(interval time.Duration, onError func(string, error), ticks ...func() error) (stop func()) {
	f := statedb.NewFlusher(interval, nil, onError)
	for _, tick := range ticks {
		f.Add("store", tick)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}
