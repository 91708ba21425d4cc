//go:build integration

package daemon

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestIntegrationAutoReleaseDrip: a strict 3/hour hold
// limit with auto_release = "drip" holds messages 4-6 of a burst in a real
// Postfix's hold queue. While the sender is over the limit nothing is
// released; once the rate has decayed (the life cycle is driven with a
// clock hours ahead), the held messages leave the hold queue oldest first,
// one per period/limit (20 minutes), and never while the key is suspended.
func TestIntegrationAutoReleaseDrip(t *testing.T) {
	addr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr})
	cfgPath := testConfig(t, t.TempDir(), addr, fmt.Sprintf(`
[quarantine]
release_command = [["postsuper", "-c", %q, "-H", "{queue_id}"], ["postqueue", "-c", %q, "-i", "{queue_id}"]]
delete_command = ["postsuper", "-c", %q, "-d", "{queue_id}"]
queue_list_command = ["postqueue", "-c", %q, "-j"]

[[limit]]
name = "threehold"
key = ["sasl_username"]
limit = 3
period = "1h"
mode = "strict"
action = "hold"
via = ["policy"]
auto_release = "drip"
`, pf.ConfigDir(), pf.ConfigDir(), pf.ConfigDir(), pf.ConfigDir()))
	td := startTestDaemon(t, cfgPath)
	for i := 1; i <= 6; i++ {
		if err := sendAs(t, pf, "alice", i); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 3, 30*time.Second)
	if _, held := pf.WaitQueue(t, 30*time.Second, func(_, held []string) bool { return len(held) == 3 }); len(held) != 3 {
		t.Fatalf("%d held, want 3", len(held))
	}
	svc := td.Quarantine()
	ctx := context.Background()
	now := time.Now()
	step := func(at time.Duration, want int) {
		t.Helper()
		if n := svc.AutoRelease(ctx, now.Add(at)); n != want {
			t.Fatalf("AutoRelease at +%v released %d, want %d\n%s", at, n, want, td.logs.String())
		}
	}
	heldNow := func() int { _, held := pf.QueueIDs(t); return len(held) }

	step(0, 0) // alice is over her limit
	if res, err := td.admin().Suspend(ctx, "alice", false); err != nil {
		t.Fatalf("suspend: %v %+v", err, res)
	}
	step(5*time.Hour, 0) // under the limit, but suspended
	if res, err := td.admin().Suspend(ctx, "alice", true); err != nil {
		t.Fatalf("resume: %v %+v", err, res)
	}
	if n := heldNow(); n != 3 {
		t.Fatalf("%d held before the release, want 3", n)
	}
	step(5*time.Hour, 1)
	msgs := sink.WaitCount(t, 4, 30*time.Second)
	if s := msgs[3].Header("Subject"); s != "message 4 from alice" {
		t.Fatalf("first released %q, want the oldest held (message 4)", s)
	}
	if n := heldNow(); n != 2 {
		t.Fatalf("%d held after one release, want 2", n)
	}
	step(5*time.Hour+time.Minute, 0) // 20 minutes between releases at 3/hour
	step(5*time.Hour+20*time.Minute, 1)
	step(5*time.Hour+40*time.Minute, 1)
	step(6*time.Hour, 0) // nothing left
	msgs = sink.WaitCount(t, 6, 30*time.Second)
	pf.WaitQueueEmpty(t, 30*time.Second)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header("Subject")]++
	}
	for i := 1; i <= 6; i++ {
		if s := fmt.Sprintf("message %d from alice", i); seen[s] != 1 {
			t.Fatalf("%q delivered %d times", s, seen[s])
		}
	}
	if es, err := td.admin().List(ctx, admin.ListQuery{State: "thawed"}); err != nil || len(es) != 3 {
		t.Fatalf("thawed entries: %v\n%s", err, entriesText(es))
	}
}
