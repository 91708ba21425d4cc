package milter

import (
	"context"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// startEngine runs the milter in front of a real engine with one strict
// 3/1h defer limit keyed by key.
func startEngine(t *testing.T, key string) *testEnv {
	t.Helper()
	return startStack(t, []policy.LimitConfig{{Name: "l", Key: []string{key}, Limit: 3,
		Period: policy.Duration(time.Hour), Mode: "strict", Action: "defer"}})
}

// startStack runs the milter in front of a real engine with limits, over
// a fresh memory store.
func startStack(t *testing.T, limits []policy.LimitConfig) *testEnv {
	t.Helper()
	e, err := policy.NewEngine(policy.Config{Limits: limits}, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return start(t, "tcp", &Server{Decider: mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
		return e.Evaluate(ctx, time.Now(), req)
	})})
}

// admittedVia sends one message in a new session whose {client_addr} is
// clientAddr and whose MAIL FROM is sender, and reports whether it was
// accepted.
func admittedVia(t *testing.T, env *testEnv, clientAddr, sender string) bool {
	t.Helper()
	s := env.session(t)
	if err := s.Macros(gomilter.CodeConn, "{client_addr}", clientAddr); err != nil {
		t.Fatal(err)
	}
	cont(t, "conn")(s.Conn("client.example.com", gomilter.FamilyInet6, 41000, "2001:db8:99::1"))
	cont(t, "helo")(s.Helo("client.example.com"))
	rcpts, _, act := transaction(t, s, sender, []string{"bob@example.org"}, simpleMsg, "Q1")
	if rcpts[0].Code != gomilter.ActContinue {
		return false
	}
	return act != nil && act.Code == gomilter.ActAccept
}

// TestMilterSpellingsShareALimit: an "IPv6:" {client_addr} (Sendmail's
// form) lost the /64 grouping, and a source-routed MAIL FROM was a sender
// of its own; both were admitted after the base spelling was refused.
func TestMilterSpellingsShareALimit(t *testing.T) {
	for _, c := range []struct{ key, baseAddr, baseSender, addr, sender string }{
		{"client_address", "2001:db8:4:4::7", "x@example.org", "IPv6:2001:db8:4:4::1", "x@example.org"},
		{"client_address", "2001:db8:4:4::7", "x@example.org", "[IPv6:2001:db8:4:4::2]", "x@example.org"},
		{"client_address", "192.0.2.20", "x@example.org", "64:ff9b::192.0.2.20", "x@example.org"},
		{"sender", "192.0.2.1", "alice29@example.org", "192.0.2.1", "<@relay.example:alice29@example.org>"},
		{"sender", "192.0.2.1", "alice3@example.org", "192.0.2.1", `"alice3"@example.org`},
	} {
		for range 3 {
			env := startEngine(t, c.key)
			for i := range 3 {
				if !admittedVia(t, env, c.baseAddr, c.baseSender) {
					t.Fatalf("%s %s: message %d refused", c.baseAddr, c.baseSender, i+1)
				}
			}
			if admittedVia(t, env, c.baseAddr, c.baseSender) {
				t.Fatalf("%s %s: fourth message admitted", c.baseAddr, c.baseSender)
			}
			if admittedVia(t, env, c.addr, c.sender) {
				t.Errorf("{client_addr} %s, MAIL FROM %s admitted after %s %s was refused", c.addr, c.sender, c.baseAddr, c.baseSender)
			}
		}
	}
}
