package cliout

import (
	"strings"
	"testing"

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
