package policy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestFullKeyTableDefersNewSenders: when the key table is full of keys
// that may not be evicted (over or near their limit), a new sender was let
// through unmeasured (DUNNO); now it gets [policy] on_full, default defer,
// with the fault counted; on_full = "dunno" keeps the old answer.
func TestFullKeyTableDefersNewSenders(t *testing.T) {
	for _, onFull := range []string{"", "dunno"} {
		m := ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: 6400})
		m.SetProtect(func(string, ratelimit.State) bool { return true })
		c := hourlyDaily()
		c.OnFull = onFull
		e, err := policy.NewEngine(c, m)
		if err != nil {
			t.Fatal(err)
		}
		deferred, passedWithFault, passed := 0, 0, 0
		for i := range 5000 {
			d := e.Evaluate(context.Background(), t0.Add(time.Duration(i)*time.Millisecond), eom(fmt.Sprintf("user%d", i)))
			full := errors.Is(d.Fault, policy.ErrKeyTableFull)
			switch {
			case full && d.Action == policy.Defer && d.Code == 450 && d.Enhanced == "4.7.1":
				deferred++
			case full && d.Action == policy.Pass:
				passedWithFault++
			case d.Action == policy.Pass && d.Fault == nil:
				passed++
			case d.Fault != nil:
				t.Fatalf("unexpected fault %v", d.Fault)
			}
		}
		t.Logf("on_full %q: of 5,000 new senders (2 limits each) into 6,400 slots: %d measured and passed, %d deferred, %d passed unmeasured",
			onFull, passed, deferred, passedWithFault)
		if passed < 2000 {
			t.Fatalf("only %d senders measured before the table filled", passed)
		}
		if onFull == "" && (deferred == 0 || passedWithFault != 0) {
			t.Fatalf("on_full default: %d deferred, %d passed with a full table", deferred, passedWithFault)
		}
		if onFull == "dunno" && (passedWithFault == 0 || deferred != 0) {
			t.Fatalf("on_full dunno: %d deferred, %d passed", deferred, passedWithFault)
		}
	}
	if _, err := policy.NewEngine(policy.Config{OnFull: "reject", Limits: hourlyDaily().Limits}, nil); err == nil {
		t.Fatal("on_full = reject accepted")
	}
}
