//go:build integration

package postfix

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestKeysAgreeWithPostfixParsing: a real Postfix unquotes a quoted
// local part and drops a source route before policy delegation; the key
// of the spelling a client wrote is the key of what Postfix sends, so
// the milter and a client on the policy socket (which see the spelling)
// and Postfix's policy requests count one sender. Each spelling is
// refused once its base spelling is.
func TestKeysAgreeWithPostfixParsing(t *testing.T) {
	e, err := policy.NewEngine(policy.Config{Limits: []policy.LimitConfig{{Name: "l", Key: []string{"sender"}, Limit: 3,
		Period: policy.Duration(time.Hour), Mode: "strict", Action: "defer"}}}, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last string // the sender of the last policy request
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	startServer(t, &Server{Decider: mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
		mu.Lock()
		last = req.Sender
		mu.Unlock()
		return e.Evaluate(ctx, time.Now(), req)
	})}, l)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + l.Addr().String()})
	form := policy.DefaultKeyForm()
	for _, c := range []struct{ base, spelling string }{
		{"alice3@example.org", `"alice3"@example.org`},
		{"alice5@example.org", `"alice5+x"@example.org`},
		{"alice29@example.org", "@relay.example:alice29@example.org"},
		{"alice31@example.org", `"Alice31"@Example.ORG`},
	} {
		send := func(from string) error {
			return mtatest.Send(t, pf.Addr(), mtatest.Mail{From: from, To: []string{"bob@example.net"},
				Data: mtatest.BuildMessage(from, "bob@example.net", "hi", "hello")})
		}
		for i := range 3 {
			if err := send(c.base); err != nil {
				t.Fatalf("%s message %d: %v", c.base, i+1, err)
			}
		}
		if err := send(c.base); err == nil {
			t.Fatalf("%s: fourth message accepted", c.base)
		}
		if err := send(c.spelling); err == nil {
			t.Errorf("MAIL FROM:<%s> accepted after %s was refused", c.spelling, c.base)
		}
		mu.Lock()
		sent := last
		mu.Unlock()
		if k, want := form.Address(c.spelling), form.Address(sent); k != want {
			t.Errorf("MAIL FROM:<%s>: Postfix sent sender=%s (key %q), the spelling's key is %q", c.spelling, sent, want, k)
		}
	}
}
