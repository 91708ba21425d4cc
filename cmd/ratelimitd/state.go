package main

import (
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratelimit/store"
)

// openState restores the rate state kept in db into mem. negligible (the
// engine's) decides which stored states have decayed away and are dropped.
// The caller starts Run for write-behind flushing, or calls Flush/Close.
func openState(db *bolt.DB, mem *store.Memory, flush time.Duration, negligible func(string, ratelimit.State, time.Time) bool) (*store.Persistent, error) {
	return store.NewPersistent(db, mem, store.PersistOptions{FlushInterval: flush, Negligible: negligible})
}
