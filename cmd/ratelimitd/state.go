package main

import (
	"errors"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratelimit/store"
)

// openState restores the rate state kept in db into mem. negligible (the
// engine's) decides which stored states have decayed away and are dropped.
// The caller starts Run for write-behind flushing, or calls Flush/Close.
func openState(db *bolt.DB, mem *store.Memory, flush time.Duration, negligible func(string, ratelimit.State, time.Time) bool) (*store.Persistent, error) {
	return store.NewPersistent(db, mem, store.PersistOptions{FlushInterval: flush, Negligible: negligible})
}

// offline is the daemon's state opened by the CLI when no daemon runs: the
// BoltDB file (lock timeout 1 s), the restored rate state and an engine on
// it.
type offline struct {
	db     *bolt.DB
	state  *store.Persistent
	engine *policy.Engine
}

func openOffline(f *config.File) (_ *offline, err error) {
	db, err := openDB(f.Server.DBPath())
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	mem := store.NewMemory(store.MemoryOptions{MaxKeys: f.Server.MaxKeys})
	probe, err := policy.NewEngine(f.PolicyConfig(), mem)
	if err != nil {
		return nil, err
	}
	state, err := openState(db, mem, 0, probe.Negligible)
	if err != nil {
		return nil, err
	}
	eng, err := policy.NewEngine(f.PolicyConfig(), state)
	if err != nil {
		return nil, err
	}
	return &offline{db: db, state: state, engine: eng}, nil
}

// close writes any rate change (a reset) and closes the file.
func (o *offline) close() error { return errors.Join(o.state.Close(), o.db.Close()) }
