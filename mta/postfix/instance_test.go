package postfix

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/policy"
)

// A client that sends no instance attribute gets one per mail transaction
// of its connection: the same for every RCPT and the end of the message,
// a new one for the next message.
func TestMessageTrackerFillsInstance(t *testing.T) {
	tr := messageTracker{conn: 7}
	seq := []struct {
		state, sender string
		newMsg        bool
	}{
		{policy.StateRcpt, "a@x", true},
		{policy.StateRcpt, "a@x", false},
		{policy.StateEndOfMessage, "a@x", false},
		{policy.StateRcpt, "a@x", true}, // after END-OF-MESSAGE
		{policy.StateRcpt, "a@x", false},
		{policy.StateRcpt, "b@x", true}, // another sender: another MAIL FROM
		{policy.StateData, "b@x", false},
		{policy.StateRcpt, "b@x", true}, // RCPT after DATA: a new transaction
	}
	prev := ""
	for i, s := range seq {
		req := policy.Request{ProtocolState: s.state, Sender: s.sender}
		tr.fill(&req)
		if req.Instance == "" {
			t.Fatalf("step %d: no instance", i)
		}
		if (req.Instance != prev) != s.newMsg {
			t.Fatalf("step %d (%s %s): instance %q after %q, want new=%v", i, s.state, s.sender, req.Instance, prev, s.newMsg)
		}
		prev = req.Instance
	}
	// An instance sent by the client is kept.
	req := policy.Request{ProtocolState: policy.StateRcpt, Instance: "abc.1"}
	tr.fill(&req)
	if req.Instance != "abc.1" {
		t.Fatalf("client instance replaced: %q", req.Instance)
	}
	// Requests outside a transaction get none.
	req = policy.Request{ProtocolState: policy.StateConnect}
	tr.fill(&req)
	if req.Instance != "" {
		t.Fatalf("CONNECT got instance %q", req.Instance)
	}
}
