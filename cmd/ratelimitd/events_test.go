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
// lists her 5 refusals (one event per [events] coalesce interval, with
// the count) with limit, rate and max, through the admin socket and,
// once the daemon has stopped, from the state file; --summary counts
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
	cli := cliWith(t, cfg)
	checkRefusals := func(where string) {
		t.Helper()
		var es []events.Event
		out := cli("events", "--since", "1h", "--json")
		if err := json.Unmarshal([]byte(out), &es); err != nil {
			t.Fatalf("%s: %v\n%s", where, err, out)
		}
		var refusals []events.Event
		n := 0
		for _, e := range es {
			if e.Action == events.Defer {
				refusals = append(refusals, e)
				n += e.Count
			}
		}
		if n != 5 || len(refusals) > 2 { // 2: the burst straddled a minute
			t.Fatalf("%s: %d refusals in %d events, want 5 in 1 or 2:\n%s", where, n, len(refusals), out)
		}
		for i, e := range refusals {
			if e.Key != "alice" || e.Limit != "hourly" || e.Max != 200 || e.Rate < 200 || e.Sender != "alice@example.org" || e.Client != "192.0.2.9" {
				t.Errorf("%s: refusal %d = %+v", where, i, e)
			}
			if i > 0 && e.Time.After(refusals[i-1].Time) {
				t.Errorf("%s: not newest first", where)
			}
		}
		for _, field := range []string{`"time":`, `"key": "alice"`, `"limit": "hourly"`, `"action": "defer"`, `"rate": 20`, `"max": 200`, `"count": `, `"last": `} {
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

// hostileSender is a 30 KB envelope sender of the kind a hostile client
// sends (a long local part with a bidi override), distinct per i.
func hostileSender(i int) string {
	return fmt.Sprintf("%05d", i) + strings.Repeat("x\u202e", 30_000/4) + "@example.org"
}

// TestFloodLeavesTheResetListed: with [events] max_count = 500, one rate
// reset and then 1,000 refused requests from one client with 30 KB
// senders (coalesced, with coalesce = "1d", into one event, or two at
// midnight, of 30 KB senders clipped to events.MaxField), then 600 refusals of distinct keys (not coalesced,
// 100 or more refusal events pruned): `events --action reset` still
// lists the reset, and `status --json` counts the coalesced, pruned and
// dropped events.
func TestFloodLeavesTheResetListed(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), `
[events]
max_count = 500
coalesce = "1d"

[[limit]]
name = "per-sender"
key = ["sender"]
limit = 1
period = "1h"
mode = "strict"
action = "defer"

[[limit]]
name = "per-client"
key = ["client_address"]
limit = 5
period = "1h"
mode = "strict"
action = "defer"
`)
	td := startTestDaemon(t, cfg)
	cli := cliWith(t, cfg)
	ask := func(sender, client string) bool {
		return strings.HasPrefix(policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sender="+sender,
			"recipient_count=1", "client_address="+client), "action=450")
	}
	ask("alice@example.org", "192.0.2.9")
	cli("rate", "reset", "192.0.2.9", "--limit", "per-client")

	refused := 0
	for i := range 1000 {
		if ask(hostileSender(i), "192.0.2.66") {
			refused++
		}
	}
	if refused != 995 {
		t.Fatalf("%d of 1,000 refused, want 995", refused)
	}
	var es []events.Event
	if err := json.Unmarshal([]byte(cli("events", "--key", "192.0.2.66", "--json")), &es); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		n += e.Count
		if len(e.Sender) > events.MaxField || !strings.Contains(e.Sender, "…[+") || e.Limit != "per-client" {
			t.Errorf("event of %d-byte sender %.40q…, limit %s", len(e.Sender), e.Sender, e.Limit)
		}
	}
	if n != 995 || len(es) > 2 { // 2: the flood straddled midnight
		t.Fatalf("%d refusals in %d events, want 995 in 1 or 2", n, len(es))
	}

	for i := range 600 {
		sender, client := fmt.Sprintf("user%d@example.org", i), fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
		if ask(sender, client) || !ask(sender, client) {
			t.Fatalf("sender %d: want the first message passed and the second refused", i)
		}
	}
	out := cli("events", "--action", "reset")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "reset") ||
		!strings.Contains(lines[1], "192.0.2.9") || !strings.Contains(lines[1], "by=") {
		t.Fatalf("events --action reset after the flood:\n%s", out)
	}

	var st struct {
		Events *events.Stats `json:"events"`
	}
	if err := json.Unmarshal([]byte(cli("status", "--json")), &st); err != nil || st.Events == nil {
		t.Fatalf("status --json: %v, events %v", err, st.Events)
	}
	if e := st.Events; e.Coalesced < 993 || e.Pruned < 100 || e.ActionsPruned != 0 || e.Dropped != 0 || e.Stored > 500 || e.ActionsStored != 1 {
		t.Errorf("status --json events: %+v", *e)
	}
	if text := cli("status"); testing.Verbose() {
		t.Log(text)
	}
	if text := cli("status"); !strings.Contains(text, "events since start: ") || !strings.Contains(text, " dropped (0 actions), pruned ") {
		t.Errorf("status lacks the event counts:\n%s", text)
	}
}

// cliWith returns a runner of the command line with --config cfg that
// fails t on a non-zero exit and returns the output.
func cliWith(t *testing.T, cfg string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		status, out, stderr := runCLI(t, "", append([]string{"--config", cfg}, args...)...)
		if status != 0 {
			t.Fatalf("%q: exit %d: %s", args, status, stderr)
		}
		return out
	}
}
