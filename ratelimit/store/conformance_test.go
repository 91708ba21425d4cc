package store_test

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit/store"
	"github.com/ratelimitd/ratelimitd/ratelimit/store/storetest"
)

// TestMemoryConformance holds the in-memory store to the store
// conformance suite (the Redis store passes the same one).
func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) policy.Store { return store.NewMemory(store.MemoryOptions{}) })
}
