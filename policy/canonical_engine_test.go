package policy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// admittedOf sends one message per request through a fresh engine with
// one 3/1h strict limit keyed by key and returns how many were admitted.
func admittedOf(t *testing.T, c policy.Config, reqs []*policy.Request) (int, *policy.Engine) {
	t.Helper()
	e := newEngine(t, c)
	n := 0
	for i, r := range reqs {
		d := e.Evaluate(context.Background(), t0.Add(time.Duration(i)*time.Second), r)
		if d.Fault != nil {
			t.Fatal(d.Fault)
		}
		if d.Action == policy.Pass {
			n++
		}
	}
	return n, e
}

func strict3(key string) policy.Config {
	return policy.Config{Limits: []policy.LimitConfig{{Name: "l", Key: []string{key}, Limit: 3,
		Period: policy.Duration(time.Hour), Mode: "strict", Action: "defer"}}}
}

// TestSpellingsOfOneMailboxShareALimit: one mailbox written six ways, and
// six clients of one IPv6 /64, were six keys (6 of 6 admitted against a
// limit of 3).
func TestSpellingsOfOneMailboxShareALimit(t *testing.T) {
	var reqs []*policy.Request
	for _, s := range []string{"alice@example.org", "Alice@Example.ORG", "alice+1@example.org",
		"ALICE+news@EXAMPLE.org", "alice+x@example.org", "alice@EXAMPLE.org"} {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: s, RecipientCount: 1, ClientAddress: "192.0.2.7"})
	}
	n, e := admittedOf(t, strict3("sender"), reqs)
	if n != 3 {
		t.Fatalf("sender spellings: %d of 6 admitted, want 3", n)
	}
	kr, err := e.Lookup(context.Background(), t0.Add(time.Minute), "Alice+x@Example.ORG")
	if err != nil || len(kr) != 1 || kr[0].Key != "alice@example.org" {
		t.Fatalf("rate show Alice+x@Example.ORG: %+v, %v", kr, err)
	}

	reqs = nil
	for i := range 6 {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "x@example.org", RecipientCount: 1,
			ClientAddress: fmt.Sprintf("2001:db8:1:1::%x", 0x100*i+7)})
	}
	if n, _ := admittedOf(t, strict3("client_address"), reqs); n != 3 {
		t.Fatalf("clients of one /64: %d of 6 admitted, want 3", n)
	}
	// IPv4-mapped IPv6 is the IPv4 client.
	reqs = []*policy.Request{}
	for _, a := range []string{"192.0.2.7", "::ffff:192.0.2.7", "192.0.2.7", "::ffff:192.0.2.7"} {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "x@example.org", RecipientCount: 1, ClientAddress: a})
	}
	if n, _ := admittedOf(t, strict3("client_address"), reqs); n != 3 {
		t.Fatalf("mapped IPv4: %d of 4 admitted, want 3", n)
	}
}

// TestOverridesInAnyCase: an override written with capitals and an
// extension applies to the canonical key; two that fold together warn.
func TestOverridesInAnyCase(t *testing.T) {
	c := strict3("sender")
	c.Limits[0].Overrides = map[string]float64{"Big+List@Example.ORG": 5, "@Partner.Example": 4}
	var reqs []*policy.Request
	for range 8 {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "big@example.org", RecipientCount: 1})
	}
	if n, _ := admittedOf(t, c, reqs); n != 5 {
		t.Fatalf("override of Big+List@Example.ORG: %d admitted, want 5", n)
	}
	for i := range reqs {
		reqs[i] = &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "Someone@partner.example", RecipientCount: 1}
	}
	if n, _ := admittedOf(t, c, reqs); n != 4 {
		t.Fatalf("domain override @Partner.Example: %d admitted, want 4", n)
	}
	c.Limits[0].Overrides["big@example.org"] = 7
	advice := strings.Join(policy.ConfigAdvice(c), "\n")
	if !strings.Contains(advice, `"Big+List@Example.ORG" and "big@example.org" are the same key`) {
		t.Fatalf("no warning for overrides that fold together:\n%s", advice)
	}
}

// TestKeyFormSettings: address_case = "keep", recipient_delimiter = "",
// ipv6_prefix and their ranges.
func TestKeyFormSettings(t *testing.T) {
	c := strict3("sender")
	keep, none := "keep", ""
	c.AddressCase, c.RecipientDelimiter = keep, &none
	var reqs []*policy.Request
	for _, s := range []string{"Alice@example.org", "alice@example.org", "alice+x@example.org", "Alice@EXAMPLE.ORG"} {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: s, RecipientCount: 1})
	}
	// Three keys, none over 3: Alice@example.org twice (the domain is
	// always folded), alice@example.org and alice+x@example.org once.
	if n, _ := admittedOf(t, c, reqs); n != 4 {
		t.Fatalf("keep/no delimiter: %d of 4 admitted, want 4", n)
	}
	for _, bad := range []policy.Config{
		{AddressCase: "upper", Limits: strict3("sender").Limits},
		{IPv6Prefix: 16, Limits: strict3("sender").Limits},
		{IPv4Prefix: 33, Limits: strict3("sender").Limits},
	} {
		if _, err := policy.NewEngine(bad, nil); err == nil {
			t.Errorf("config %+v accepted", bad)
		}
	}
}
