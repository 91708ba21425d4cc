package ratestore_test

import (
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/ratestore/storetest"
)

// TestMemoryConformance holds the in-memory store to the store
// conformance suite (the Redis store passes the same one).
func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) policy.Store { return ratestore.NewMemory(ratestore.MemoryOptions{}) })
}

// TestPersistentConformance holds the persistent store (memory with
// BoltDB write-behind, deciding stacks under one shard lock) to the same
// suite.
func TestPersistentConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) policy.Store {
		db, err := bbolt.Open(filepath.Join(t.TempDir(), "rates.db"), 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ratestore.NewPersistent(db, ratestore.NewMemory(ratestore.MemoryOptions{}), ratestore.PersistOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			p.Close()
			db.Close()
		})
		return p
	})
}
