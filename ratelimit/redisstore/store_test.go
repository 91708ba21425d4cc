package redisstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit/redisstore"
	"github.com/ratelimitd/ratelimitd/ratelimit/store/storetest"
)

// open connects a store to addrs with a key prefix of its own.
func open(t *testing.T, o redisstore.Options) *redisstore.Store {
	t.Helper()
	if o.KeyPrefix == "" {
		o.KeyPrefix = fmt.Sprintf("t%d:", prefixes.Add(1))
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	s, err := redisstore.New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

var prefixes atomic.Int64

// TestConformance holds the Redis store to the store conformance suite:
// random traces in every mode agree with policy.EvaluateStack over the
// in-memory store to 1e-12.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) policy.Store {
		return open(t, redisstore.Options{Addrs: []string{srv.Addr}, UseCallerTime: true})
	})
}
