package milter

import (
	"fmt"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/policy"
)

// outcome names what the MTA was told at the end of a message.
func outcome(mods []gomilter.ModifyAction, act *gomilter.Action) string {
	switch {
	case act == nil:
		return "refused at RCPT"
	case act.Code == gomilter.ActDiscard:
		return "frozen"
	case act.Code == gomilter.ActReplyCode:
		return fmt.Sprintf("reply %d", act.SMTPCode)
	case act.Code == gomilter.ActAccept:
		for _, m := range mods {
			if m.Code == gomilter.ActQuarantine {
				return "held"
			}
		}
		return "accepted"
	}
	return string(act.Code)
}

// TestLadderOrderDecidesMessage: a message's RCPT and END-OF-MESSAGE
// decisions are merged by the stack's order (the limit earliest in the
// stack decides), not by severity; a tie or a decision of no limit falls
// back to the stricter action, and a warning never outranks an answer.
func TestLadderOrderDecidesMessage(t *testing.T) {
	freeze := func(place int) policy.Decision {
		return policy.Decision{Action: policy.Freeze, Limit: "freeze", Key: "alice", Place: place}
	}
	deferAt := func(place int) policy.Decision {
		return policy.Decision{Action: policy.Defer, Code: 450, Enhanced: "4.7.1", Limit: "defer", Key: "alice", Place: place}
	}
	hold := func(place int) policy.Decision {
		return policy.Decision{Action: policy.Hold, Limit: "hold", Key: "alice", Place: place}
	}
	for _, tc := range []struct {
		name string
		rcpt []policy.Decision // one per recipient
		eom  policy.Decision
		want string
	}{
		{"freeze earlier, defer later", []policy.Decision{freeze(1)}, deferAt(2), "frozen"},
		{"defer earlier, freeze later", []policy.Decision{freeze(2)}, deferAt(1), "reply 450"},
		{"hold earlier, freeze later", []policy.Decision{hold(1)}, freeze(2), "held"},
		{"freeze earlier, hold later", []policy.Decision{hold(2)}, freeze(1), "frozen"},
		{"recipients: hold earlier, freeze later", []policy.Decision{freeze(3), hold(1)}, policy.Decision{}, "held"},
		{"recipients: freeze earlier, hold later", []policy.Decision{hold(3), freeze(2)}, policy.Decision{}, "frozen"},
		{"warn earlier, freeze later", []policy.Decision{freeze(2)}, policy.Decision{Action: policy.Warn, Place: 1}, "frozen"},
		{"tie: stricter", []policy.Decision{freeze(1)}, deferAt(1), "reply 450"},
		{"no limit (a fault's defer): stricter", []policy.Decision{freeze(1)}, deferAt(0), "reply 450"},
		{"freeze of no limit: stricter", []policy.Decision{freeze(0)}, hold(1), "frozen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcpts := []string{"bob@example.org", "carol@example.org"}[:len(tc.rcpt)]
			dec := &fakeDecider{rule: func(req *policy.Request) policy.Decision {
				if req.ProtocolState == policy.StateEndOfMessage {
					return tc.eom
				}
				for i, r := range rcpts {
					if req.Recipient == r {
						return tc.rcpt[i]
					}
				}
				return policy.Decision{}
			}}
			env := start(t, "tcp", &Server{Decider: dec})
			s := env.session(t)
			connect(t, s)
			for i := range 3 { // the merge is per message: repeat on one connection
				_, mods, act := transaction(t, s, "alice@example.com", rcpts, simpleMsg, fmt.Sprintf("Q%d", i))
				if got := outcome(mods, act); got != tc.want {
					t.Fatalf("message %d: %s, want %s", i+1, got, tc.want)
				}
			}
		})
	}
}

// TestLadderOrderThroughEngine: in front of a real engine, a per_rcpt
// freeze answered at RCPT and a per_byte defer answered at END-OF-MESSAGE
// are merged by their places in the stack, which the engine sets.
func TestLadderOrderThroughEngine(t *testing.T) {
	rcpts := policy.LimitConfig{Name: "rcpts", Key: []string{"sasl_username"}, Per: "rcpt", Limit: 1,
		Period: policy.Duration(time.Hour), Mode: "strict", Action: "freeze"}
	bytes := policy.LimitConfig{Name: "bytes", Key: []string{"sasl_username"}, Per: "byte", Limit: 10,
		Period: policy.Duration(time.Hour), Mode: "strict", Action: "defer"}
	for _, tc := range []struct {
		name   string
		stack  []policy.LimitConfig
		second string // the second message: over both limits
	}{
		{"freeze first", []policy.LimitConfig{rcpts, bytes}, "frozen"},
		{"defer first", []policy.LimitConfig{bytes, rcpts}, "refused at RCPT"}, // bytes is over at RCPT already
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 3 {
				env := startStack(t, tc.stack)
				s := env.session(t)
				connect(t, s)
				// The first message is over only the byte limit.
				_, mods, act := transaction(t, s, "alice@example.com", []string{"bob@example.org"}, simpleMsg, "Q1")
				if got := outcome(mods, act); got != "reply 450" {
					t.Fatalf("first message: %s, want reply 450", got)
				}
				_, mods, act = transaction(t, s, "alice@example.com", []string{"bob@example.org"}, simpleMsg, "Q2")
				if got := outcome(mods, act); got != tc.second {
					t.Fatalf("second message: %s, want %s", got, tc.second)
				}
			}
		})
	}
}
