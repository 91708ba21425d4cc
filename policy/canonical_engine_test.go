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

// refusedAfterBase sends base until the 3/1h limit keyed by attr refuses
// it, then spelling; it reports whether spelling was refused too.
func refusedAfterBase(t *testing.T, c policy.Config, attr, base, spelling string) bool {
	t.Helper()
	mk := func(v string) *policy.Request {
		r := &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "x@example.org", RecipientCount: 1, ClientAddress: "192.0.2.1"}
		switch attr {
		case "sender", "sender_domain":
			r.Sender = v
		default:
			r.ClientAddress = v
		}
		return r
	}
	n, _ := admittedOf(t, c, []*policy.Request{mk(base), mk(base), mk(base), mk(base), mk(spelling)})
	if n < 3 {
		t.Fatalf("%s %q: %d admitted of the base's first 3", attr, base, n)
	}
	return n == 3
}

// TestOtherSpellingsOfOneSenderShareItsLimit: quoted local parts, angle
// brackets, source routes, inet_aton's forms and address literals were
// keys of their own, each admitted after the base spelling was refused.
func TestOtherSpellingsOfOneSenderShareItsLimit(t *testing.T) {
	for _, c := range []struct{ attr, base, spelling string }{
		{"sender", "alice3@example.org", `"alice3"@example.org`},
		{"sender", "alice5@example.org", `"alice5+x"@example.org`},
		{"sender", "alice13@example.org", "<alice13@example.org>"},
		{"sender", "alice29@example.org", "@relay.example:alice29@example.org"},
		{"sender", "alice29@example.org", "<@relay.example,@b.example:Alice29+x@Example.ORG>"},
		{"sender_domain", "a@example.org", "<b@Example.ORG>"},
		{"sender_domain", "a@example.org", "<@relay.example:b@example.org>"},
		{"client_address", "192.0.2.9", "3221225993"},
		{"client_address", "192.0.2.15", "0300.0.02.017"},
		{"client_address", "192.0.2.8", "[192.0.2.8]"},
		{"client_address", "2001:db8:3:3::5", "[2001:db8:3:3::1]"},
		{"client_address", "2001:db8:4:4::7", "IPv6:2001:db8:4:4::1"},
		{"client_address", "2001:db8:4:4::7", "[IPv6:2001:db8:4:4::1]"},
		{"client_address", "192.0.2.20", "64:ff9b::192.0.2.20"},
		{"client_address", "192.0.2.11", "::192.0.2.11"},
		{"client_address", "192.0.2.30", "2001:0:c633:6401::3fff:fde1"},
		{"client_address", "192.0.2.46", "2002:c000:22e::1"},
		// inet_aton refuses both: one key for every malformed spelling.
		{"client_address", "192.000.002.008", "192.0.2.15."},
	} {
		for range 3 {
			if !refusedAfterBase(t, strict3(c.attr), c.attr, c.base, c.spelling) {
				t.Errorf("%s %q admitted after %q was refused", c.attr, c.spelling, c.base)
			}
		}
	}
}

// TestStrangersBehindOneIPv6PrefixAreApart: NAT64, IPv4-compatible,
// Teredo and 6to4 clients shared one /64 key (every IPv4 client behind
// NAT64 one allowance), and ::1 was merged with ::192.0.2.11.
func TestStrangersBehindOneIPv6PrefixAreApart(t *testing.T) {
	nat := strict3("client_address")
	nat.NAT64Prefixes = []string{"2001:db8:64::/96", "2001:db8:6400::/40"}
	for _, c := range []struct {
		cfg  policy.Config
		a, b string
	}{
		{strict3("client_address"), "64:ff9b::192.0.2.20", "64:ff9b::198.51.100.20"},
		{strict3("client_address"), "::192.0.2.11", "::1"},
		{strict3("client_address"), "::1", "::198.51.100.21"},
		{strict3("client_address"), "2001:0:c633:6401::3fff:fde1", "2001:0:c633:6401::3fff:fde0"},
		{strict3("client_address"), "2002:c000:22e::1", "2002:c000:22f::1"},
		{nat, "2001:db8:64::c000:214", "2001:db8:64::c633:6414"},
		{nat, "2001:db8:64c0:2:14::", "2001:db8:64c6:3364:14::"},
	} {
		for range 3 {
			if refusedAfterBase(t, c.cfg, "client_address", c.a, c.b) {
				t.Errorf("client %q refused after %q was: one key", c.b, c.a)
			}
		}
	}
	// The configured prefixes carry the IPv4 client (RFC 6052 2.2).
	for _, s := range []string{"2001:db8:64::c000:214", "2001:db8:64c0:2:14::"} {
		if !refusedAfterBase(t, nat, "client_address", "192.0.2.20", s) {
			t.Errorf("NAT64 client %q is not 192.0.2.20", s)
		}
	}
	bad := strict3("client_address")
	for _, p := range []string{"2001:db8:64::/80", "192.0.2.0/24", "nat64"} {
		bad.NAT64Prefixes = []string{p}
		if _, err := policy.NewEngine(bad, nil); err == nil || !strings.Contains(err.Error(), "policy.nat64_prefixes[0]") {
			t.Errorf("nat64_prefixes %q: %v", p, err)
		}
	}
}

// TestCarriedIPv4InSubnetsAndExemptions: client_subnet and exempt
// networks see the IPv4 client a NAT64 address carries.
func TestCarriedIPv4InSubnetsAndExemptions(t *testing.T) {
	if !refusedAfterBase(t, strict3("client_subnet"), "client_address", "192.0.2.99", "64:ff9b::192.0.2.20") {
		t.Error("64:ff9b::192.0.2.20 is not in client_subnet 192.0.2.0/24")
	}
	c := strict3("client_address")
	c.Exempt.Networks = []string{"192.0.2.0/24"}
	var reqs []*policy.Request
	for range 5 {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "x@example.org", RecipientCount: 1,
			ClientAddress: "64:ff9b::192.0.2.20"})
	}
	if n, _ := admittedOf(t, c, reqs); n != 5 {
		t.Errorf("exempt 192.0.2.0/24 behind NAT64: %d of 5 admitted", n)
	}
}

// TestLongKeysAreBounded: a sender of 30 KB was a key of 30 KB; a key
// over policy.MaxKeyLen is cut and ends in a hash, so two long senders
// stay apart and rate show finds the key by its long spelling.
func TestLongKeysAreBounded(t *testing.T) {
	long := strings.Repeat("a", 30000)
	for range 3 {
		if refusedAfterBase(t, strict3("sender"), "sender", long+"1@example.org", long+"2@example.org") {
			t.Error("two long senders share a key")
		}
	}
	var reqs []*policy.Request
	for range 4 {
		reqs = append(reqs, &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: long + "@example.org", RecipientCount: 1})
	}
	n, e := admittedOf(t, strict3("sender"), reqs)
	if n != 3 {
		t.Fatalf("long sender: %d of 4 admitted", n)
	}
	kr, err := e.Lookup(context.Background(), t0.Add(time.Minute), strings.ToUpper(long)+"+x@Example.ORG")
	if err != nil || len(kr) != 1 {
		t.Fatalf("rate show of the long sender: %+v, %v", kr, err)
	}
	if k := kr[0].Key; len(k) > policy.MaxKeyLen || !strings.HasPrefix(k, "aaaa") || k != policy.BoundKey(long+"@example.org") {
		t.Fatalf("key of %d bytes: %.40q…", len(k), k)
	}
	if policy.DefaultKeyForm().Key(kr[0].Key) != kr[0].Key {
		t.Fatal("the bounded key typed back is another key")
	}
}
