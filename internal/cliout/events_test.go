package cliout

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
)

// TestEventsPrintsKeysSafely: a key with terminal control characters
// prints through termsafe in the table, and exactly in JSON.
func TestEventsPrintsKeysSafely(t *testing.T) {
	var b strings.Builder
	Events(&b, []events.Event{{Key: "evil\x1b[2J\u202e", Action: events.Defer, Limit: "hourly", Rate: 201, Max: 200, Sender: "a\rb"}})
	if out := b.String(); strings.ContainsAny(out, "\x1b\r\u202e") || !strings.Contains(out, "evil") || !strings.Contains(out, "201/200") {
		t.Errorf("Events: %q", out)
	}
	b.Reset()
	EventSummary(&b, []events.KeySummary{{Key: "x\x07y", Refusals: 2, Limits: []string{"h\x1b"}}})
	if out := b.String(); strings.ContainsAny(out, "\x07\x1b") {
		t.Errorf("EventSummary: %q", out)
	}
}

// TestEventsPrintsCoalescedCount: an event of coalesced refusals shows
// its count and last time; a single one shows neither.
func TestEventsPrintsCoalescedCount(t *testing.T) {
	var b strings.Builder
	first := time.Date(2026, 11, 28, 1, 3, 0, 0, time.Local)
	Events(&b, []events.Event{
		{Time: first, Last: first.Add(59 * time.Second), Count: 995, Key: "192.0.2.66", Action: events.Defer, Limit: "per-client"},
		{Time: first, Last: first, Count: 1, Key: "alice", Action: events.Reset, By: "root"},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "count=995 last=2026-11-28 01:03:59") || strings.Contains(lines[2], "count=") {
		t.Errorf("Events:\n%s", b.String())
	}
}
