package policy_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// A state holding an infinite rate (written by an older release's
// conversion) is shown finite, in the limit's units, and its view is valid
// JSON: rate show --json and rate list --json failed with "json:
// unsupported value: +Inf".
func TestViewOfInfiniteRateIsFinite(t *testing.T) {
	mem := ratestore.NewMemory(ratestore.MemoryOptions{})
	e, err := policy.NewEngine(hourlyDaily(), mem)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inf := ratelimit.State{Time: t0.UnixNano(), Rate: math.Inf(1)}
	if err := mem.Update(ctx, "hourly", "mallory", func(ratelimit.State) (ratelimit.State, bool) { return inf, true }); err != nil {
		t.Fatal(err)
	}
	kr, err := e.Lookup(ctx, t0, "mallory")
	if err != nil || len(kr) != 1 {
		t.Fatal(kr, err)
	}
	if math.IsInf(kr[0].Rate, 0) || math.IsInf(kr[0].State.Rate, 0) || !kr[0].Refusing {
		t.Errorf("view %+v", kr[0])
	}
	if _, err := json.Marshal([]policy.KeyRate(kr)); err != nil {
		t.Error(err)
	}
}
