package postfix

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// TestPolicySpellingsShareALimit: a sender in angle brackets, quoted or
// source-routed, and a client_address in inet_aton's or an address
// literal's form were keys of their own on the policy delegation wire,
// each admitted after the base spelling was refused.
func TestPolicySpellingsShareALimit(t *testing.T) {
	// Base spelling, then another spelling of it, for each key attribute.
	spellings := map[string][]string{
		"sender": {"alice13@example.org", "<alice13@example.org>", "alice3@example.org", `"alice3"@example.org`,
			"alice5@example.org", `"alice5+x"@example.org`, "alice29@example.org", "@relay.example:alice29@example.org"},
		"client_address": {"192.0.2.9", "3221225993", "2001:db8:3:3::5", "[2001:db8:3:3::1]", "2001:db8:4:4::7",
			"IPv6:2001:db8:4:4::1", "192.0.2.20", "64:ff9b::192.0.2.20", "192.0.2.11", "::192.0.2.11"},
	}
	var cases []struct{ key, base, spelling string }
	for key, s := range spellings {
		for i := 0; i < len(s); i += 2 {
			cases = append(cases, struct{ key, base, spelling string }{key, s[i], s[i+1]})
		}
	}
	for _, c := range cases {
		for range 3 {
			e, err := policy.NewEngine(policy.Config{Limits: []policy.LimitConfig{{Name: "l", Key: []string{c.key}, Limit: 3,
				Period: policy.Duration(time.Hour), Mode: "strict", Action: "defer"}}}, ratestore.NewMemory(ratestore.MemoryOptions{}))
			if err != nil {
				t.Fatal(err)
			}
			ts := startServer(t, &Server{Decider: mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
				return e.Evaluate(ctx, time.Now(), req)
			})}, nil)
			cl := ts.dial(t)
			ask := func(i int, v string) string {
				sender, client := "x@example.org", "192.0.2.1"
				if c.key == "sender" {
					sender = v
				} else {
					client = v
				}
				return cl.ask(t, []byte(fmt.Sprintf("request=smtpd_access_policy\nprotocol_state=RCPT\nprotocol_name=ESMTP\n"+
					"client_address=%s\nclient_name=unknown\nsender=%s\nrecipient=bob@example.net\nrecipient_count=0\ninstance=a.%d\n\n",
					client, sender, i)))
			}
			for i := range 3 {
				if got := ask(i, c.base); got != "action=DUNNO" {
					t.Fatalf("%s %q, request %d: %q", c.key, c.base, i+1, got)
				}
			}
			if got := ask(3, c.base); got == "action=DUNNO" {
				t.Fatalf("%s %q: fourth message admitted", c.key, c.base)
			}
			if got := ask(4, c.spelling); got == "action=DUNNO" || !strings.Contains(got, "4.7.1") {
				t.Errorf("%s %q after %q was refused: %q", c.key, c.spelling, c.base, got)
			}
		}
	}
}
