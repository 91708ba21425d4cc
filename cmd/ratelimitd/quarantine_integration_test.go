package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

func sendNumbered(t *testing.T, addr, user string, n int) error {
	return mtatest.Send(t, addr, mtatest.Mail{
		Login: user, ClientAddr: "192.0.2.7",
		From: user + "@example.org", To: []string{"rcpt@example.net"},
		Data: mtatest.BuildMessage(user+"@example.org", "rcpt@example.net", fmt.Sprintf("newsletter part %02d", n),
			fmt.Sprintf("Dear reader,\nthis is part %d of the newsletter.\n", n)),
	})
}

// TestIntegrationHoldThroughPolicy: a strict 10/hour hold limit answered
// through policy delegation puts messages 11-30 in Postfix's hold queue;
// quarantine thaw --sender --reset-rate releases them with postsuper -H.
func TestIntegrationHoldThroughPolicy(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port)})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf(`
[quarantine]
release_command = ["postsuper", "-c", %q, "-H", "{queue_id}"]
delete_command = ["postsuper", "-c", %q, "-d", "{queue_id}"]
show_command = ["postcat", "-c", %q, "-q", "{queue_id}"]

[[limit]]
name = "tenhold"
key = ["sasl_username"]
limit = 10
period = "1h"
mode = "strict"
action = "hold"
via = ["policy"]
`, pf.ConfigDir(), pf.ConfigDir(), pf.ConfigDir()))
	td := startTestDaemon(t, cfgPath)

	for i := 1; i <= 30; i++ {
		if err := sendNumbered(t, pf.Addr(), "alice", i); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 10, 30*time.Second)
	_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 20 })
	if len(held) != 20 {
		t.Fatalf("%d held, want 20", len(held))
	}
	time.Sleep(500 * time.Millisecond)
	if n := sink.Count(); n != 10 {
		t.Fatalf("sink has %d, want 10 before thaw", n)
	}
	out, err := cli(t, "--config", cfgPath, "quarantine", "list", "--sender", "alice@example.org")
	if err != nil || !strings.Contains(out, "20 messages") || strings.Count(out, " held ") != 20 {
		t.Fatalf("quarantine list: %v\n%s", err, out)
	}
	first := strings.Fields(strings.Split(out, "\n")[1])[0]
	jl, err := cli(t, "--config", cfgPath, "quarantine", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range held {
		if !strings.Contains(jl, `"queue_id":"`+id+`"`) {
			t.Fatalf("held queue ID %s not recorded:\n%s", id, jl)
		}
	}
	// show uses postcat for held mail.
	out, err = cli(t, "--config", cfgPath, "quarantine", "show", first)
	if err != nil || !strings.Contains(out, "newsletter part") {
		t.Fatalf("quarantine show %s: %v\n%s", first, err, out)
	}
	out, err = cli(t, "--config", cfgPath, "quarantine", "thaw", "--sender", "alice@example.org", "--reset-rate")
	if err != nil || !strings.Contains(out, "20 thawed, 0 failed") {
		t.Fatalf("thaw: %v\n%s", err, out)
	}
	msgs := sink.WaitCount(t, 30, 60*time.Second)
	pf.WaitQueueEmpty(t, 30*time.Second)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[m.Header("Subject")]++
	}
	for i := 1; i <= 30; i++ {
		if s := fmt.Sprintf("newsletter part %02d", i); seen[s] != 1 {
			t.Fatalf("%q delivered %d times", s, seen[s])
		}
	}
	// The rate was reset: alice can send again at once.
	if err := sendNumbered(t, pf.Addr(), "alice", 31); err != nil {
		t.Fatal(err)
	}
	sink.WaitCount(t, 31, 30*time.Second)
	if all, held := pf.QueueIDs(t); len(all) != 0 || len(held) != 0 {
		t.Fatalf("queue not empty: %v held %v", all, held)
	}
	if !strings.Contains(td.logs.String(), "alice has 1 quarantined messages") || !strings.Contains(td.logs.String(), "alice has 20 quarantined messages") {
		t.Fatalf("no alert lines in the log:\n%s", td.logs.String())
	}
}
