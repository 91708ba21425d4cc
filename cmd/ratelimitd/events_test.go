package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/events"
)

// TestEventsListRefusalsOfBurst: after a 205-message burst from alice
// against the 200/1h defer limit, `ratelimitd events --since 1h --json`
// lists her 5 refusals with limit, rate and max, through the admin socket
// and, once the daemon has stopped, from the state file; --summary counts
// them; a rate reset and a reload are recorded with who and what.
func TestEventsListRefusalsOfBurst(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
	td := startTestDaemon(t, cfg)
	deferred := 0
	for range 205 {
		if ans := policyQuery(t, td.policyAddr, "alice", "END-OF-MESSAGE"); strings.HasPrefix(ans, "action=450") {
			deferred++
		}
	}
	if deferred != 5 {
		t.Fatalf("%d of 205 deferred, want 5", deferred)
	}
	cli := func(args ...string) string {
		t.Helper()
		status, out, stderr := runCLI(t, "", append([]string{"--config", cfg}, args...)...)
		if status != 0 {
			t.Fatalf("%q: exit %d: %s", args, status, stderr)
		}
		return out
	}
	checkRefusals := func(where string) {
		t.Helper()
		var es []events.Event
		out := cli("events", "--since", "1h", "--json")
		if err := json.Unmarshal([]byte(out), &es); err != nil {
			t.Fatalf("%s: %v\n%s", where, err, out)
		}
		var refusals []events.Event
		for _, e := range es {
			if e.Action == events.Defer {
				refusals = append(refusals, e)
			}
		}
		if len(refusals) != 5 {
			t.Fatalf("%s: %d refusals, want 5:\n%s", where, len(refusals), out)
		}
		for i, e := range refusals {
			if e.Key != "alice" || e.Limit != "hourly" || e.Max != 200 || e.Rate < 200 || e.Sender != "alice@example.org" || e.Client != "192.0.2.9" {
				t.Errorf("%s: refusal %d = %+v", where, i, e)
			}
			if i > 0 && e.Time.After(refusals[i-1].Time) {
				t.Errorf("%s: not newest first", where)
			}
		}
		for _, field := range []string{`"time":`, `"key": "alice"`, `"limit": "hourly"`, `"action": "defer"`, `"rate": 20`, `"max": 200`} {
			if !strings.Contains(out, field) {
				t.Errorf("%s: JSON lacks %s:\n%s", where, field, out)
			}
		}
		sum := cli("events", "--since", "1h", "--summary")
		if lines := strings.Split(strings.TrimSpace(sum), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "KEY") ||
			strings.Fields(lines[1])[0] != "alice" || strings.Fields(lines[1])[1] != "5" || !strings.HasSuffix(lines[1], "hourly") {
			t.Errorf("%s: --summary:\n%s", where, sum)
		}
	}
	checkRefusals("daemon")

	cli("rate", "reset", "alice", "--limit", "hourly")
	td.d.Reload()
	out := cli("events", "--action", "reset,reload")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "reload") || !strings.Contains(lines[1], "detail="+cfg) ||
		!strings.Contains(lines[2], "reset") || !strings.Contains(lines[2], "alice") || !strings.Contains(lines[2], "by=") {
		t.Errorf("events --action reset,reload:\n%s", out)
	}
	if out := cli("events", "--key", "bob"); strings.TrimSpace(out) != "no events" {
		t.Errorf("events --key bob:\n%s", out)
	}

	td.stop()
	td.d = nil
	checkRefusals("offline")
	if out := cli("events", "--action", "reset"); !strings.Contains(out, "alice") {
		t.Errorf("offline events --action reset:\n%s", out)
	}
}
