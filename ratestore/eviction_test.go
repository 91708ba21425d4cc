package ratestore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Protected eviction: a flood of new keys never evicts a key over or near
// its limit.

// A flood of new keys never evicts a key over or near
// its limit; when nothing is evictable, new keys are refused and counted.
func TestMemoryFloodKeepsOffender(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(MemoryOptions{MaxKeys: 1000})
	lim := hourlyExp
	m.SetProtect(func(_ string, s ratelimit.State) bool { return lim.Rate(s, t0) >= ProtectFraction*lim.Limit })
	over := burst(lim, ratelimit.State{}, t0, 20)
	m.Update(ctx, "hourly", "mallory", set(over))
	for i := range 1500 {
		if err := m.Update(ctx, "hourly", fmt.Sprint("flood", i), set(ratelimit.State{Time: t0.UnixNano(), Rate: 1})); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := m.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("offender evicted by the flood: %v", s)
	}
	if m.Evicted() == 0 {
		t.Fatal("nothing evicted")
	}
	// Fill every shard with protected keys: new keys are refused.
	refused := 0
	for i := range 5000 {
		err := m.Update(ctx, "hourly", fmt.Sprint("hot", i), set(over))
		if errors.Is(err, ErrKeyPressure) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused == 0 || m.Refused() != int64(refused) {
		t.Fatalf("refused %d, Refused() = %d", refused, m.Refused())
	}
	if s, _ := m.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("offender evicted by protected keys: %v", s)
	}
	checkInvariants(t, m)
}

// The same through Persistent, whose protection uses the limit parameters.
func TestPersistentFloodKeepsOffender(t *testing.T) {
	ctx := context.Background()
	db, _ := openDB(t, filepath.Join(t.TempDir(), "ratelimitd.db"))
	p := newPersistent(t, db, MemoryOptions{MaxKeys: 1000}, PersistOptions{
		Limits: map[string]ratelimit.Limit{"hourly": hourlyExp}, Now: func() time.Time { return t0 }})
	over := burst(hourlyExp, ratelimit.State{}, t0, 20)
	p.Update(ctx, "hourly", "mallory", set(over))
	for i := range 1500 {
		p.Update(ctx, "hourly", fmt.Sprint("flood", i), set(burst(hourlyExp, ratelimit.State{}, t0, 1)))
	}
	if s, _ := p.Get(ctx, "hourly", "mallory"); s != over {
		t.Fatalf("offender evicted by the flood: %v", s)
	}
	p.Close()
}
