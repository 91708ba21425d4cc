package policy

import (
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

// canonicalExamples is the table docs/keys.md shows: one mailbox or one
// customer network, however it is spelt, is one key.
var canonicalExamples = []struct{ kind, in, want string }{
	{"address", "alice@example.org", "alice@example.org"},
	{"address", "Alice@Example.ORG", "alice@example.org"},
	{"address", "alice+1@example.org", "alice@example.org"},
	{"address", "ALICE+news@EXAMPLE.org", "alice@example.org"},
	{"address", "alice@EXAMPLE.org.", "alice@example.org"},
	{"address", "+alice@example.org", "+alice@example.org"},
	{"address", "a+b+c@example.org", "a@example.org"},
	{"address", "anna@Bücher.Example", "anna@xn--bcher-kva.example"},
	{"address", "\"Odd+Quoted\"@example.org", "odd@example.org"},
	{"address", "\"alice3\"@example.org", "alice3@example.org"},
	{"address", "\"alice5+x\"@example.org", "alice5@example.org"},
	{"address", "\"al\\ice\"@example.org", "alice@example.org"},
	{"address", "<alice13@example.org>", "alice13@example.org"},
	{"address", "@relay.example:alice29@example.org", "alice29@example.org"},
	{"address", "<@a.example,@b.example:Alice+x@Example.ORG>", "alice@example.org"},
	{"address", "\"John Doe+x\"@example.org", "\"john doe\"@example.org"},
	{"address", "john doe@example.org", "\"john doe\"@example.org"},
	{"address", "\"a\\\"b\"@example.org", "\"a\\\"b\"@example.org"},
	{"address", "\"a@b\"@example.org", "\"a@b\"@example.org"},
	{"address", "", "<>"},
	{"address", "<>", "<>"},
	{"address", "postmaster", "postmaster"},
	{"client", "192.0.2.7", "192.0.2.7"},
	{"client", "::ffff:192.0.2.7", "192.0.2.7"},
	{"client", "2001:db8:1:1::1", "2001:db8:1:1::/64"},
	{"client", "2001:DB8:1:1:ffff:ffff:ffff:ffff", "2001:db8:1:1::/64"},
	{"client", "fe80::1%eth0", "fe80::/64"},
	{"client", "3221225993", "192.0.2.9"},
	{"client", "0300.0.02.017", "192.0.2.15"},
	{"client", "0xc0.0.2.15", "192.0.2.15"},
	{"client", "192.0.527", "192.0.2.15"},
	{"client", "192.0.2.010", "192.0.2.8"},
	{"client", "192.000.002.008", "invalid-address"},
	{"client", "192.0.2.15.", "invalid-address"},
	{"client", "192.0.2.256", "invalid-address"},
	{"client", "[192.0.2.8]", "192.0.2.8"},
	{"client", "[2001:db8:3:3::1]", "2001:db8:3:3::/64"},
	{"client", "IPv6:2001:db8:4:4::1", "2001:db8:4:4::/64"},
	{"client", "[IPv6:2001:db8:4:4::2]", "2001:db8:4:4::/64"},
	{"client", "[2001:db8::g]", "invalid-address"},
	{"client", "64:ff9b::192.0.2.20", "192.0.2.20"},
	{"client", "64:ff9b::198.51.100.20", "198.51.100.20"},
	{"client", "::192.0.2.11", "192.0.2.11"},
	{"client", "::198.51.100.21", "198.51.100.21"},
	{"client", "::1", "::1"},
	{"client", "[::1]", "::1"},
	{"client", "::", "::"},
	{"client", "2001:0:c633:6401::3fff:fde1", "192.0.2.30"},
	{"client", "2001:0:c633:6401::3fff:fde0", "192.0.2.31"},
	{"client", "2002:c000:22e::1", "192.0.2.46"},
	{"client", "2002:c633:6416:1::1", "198.51.100.22"},
	{"client", "unknown", "unknown"},
	{"key", "Alice+x@Example.ORG", "alice@example.org"},
	{"key", "Alice+x@Example.ORG|2001:db8:1:1::99", "alice@example.org|2001:db8:1:1::/64"},
	{"key", "@Example.ORG", "@example.org"},
	{"key", "Mail.Example.ORG", "mail.example.org"},
	{"key", "2001:db8:1:1::/64", "2001:db8:1:1::/64"},
	{"key", "<Alice+x@Example.ORG>|[IPv6:2001:db8:1:1::99]", "alice@example.org|2001:db8:1:1::/64"},
	{"key", "64:ff9b::192.0.2.20", "192.0.2.20"},
	{"key", "1234", "1234"},
}

func TestCanonicalKeyExamples(t *testing.T) {
	f := DefaultKeyForm()
	for _, c := range canonicalExamples {
		var got string
		switch c.kind {
		case "address":
			got = f.Address(c.in)
		case "client":
			got = f.Client(c.in)
		default:
			got = f.Key(c.in)
		}
		if got != c.want {
			t.Errorf("%s(%q) = %q, want %q", c.kind, c.in, got, c.want)
		}
	}
}

func TestCanonicalKeyOptions(t *testing.T) {
	keep := KeyForm{FoldCase: false, Delimiters: "", IPv4Prefix: 24, IPv6Prefix: 48}
	for _, c := range []struct{ got, want string }{
		{keep.Address("Alice+x@Example.ORG"), "Alice+x@example.org"},
		{keep.Client("192.0.2.77"), "192.0.2.0/24"},
		{keep.Client("2001:db8:1:1::1"), "2001:db8:1::/48"},
		{KeyForm{FoldCase: true, Delimiters: "+-", IPv4Prefix: 32, IPv6Prefix: 128}.Address("Bob-list@x.org"), "bob@x.org"},
		{KeyForm{FoldCase: true, Delimiters: "+-", IPv4Prefix: 32, IPv6Prefix: 128}.Client("2001:db8::1"), "2001:db8::1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// FuzzCanonicalKey checks that canonical keys are fixed points (an
// operator who types a key rate list printed finds the same key), that
// folding never adds a key separator, that no key an operator types is
// longer than MaxKeyLen, and that nothing panics. Seeded with every
// spelling of canonicalExamples.
func FuzzCanonicalKey(f *testing.F) {
	for _, c := range canonicalExamples {
		f.Add(c.in)
	}
	f.Add("x'$(id)'@example.org")
	f.Add("ß@İ.example")
	f.Add("anna@Bücher。")
	f.Add("@Ӏ")
	f.Add(strings.Repeat("ä", 300) + "@example.org|192.0.2.7")
	f.Add("2001:db8:64:c0:0:2:1400::1")
	forms := []KeyForm{DefaultKeyForm(), {Delimiters: "+-=", IPv4Prefix: 24, IPv6Prefix: 56,
		NAT64: []netip.Prefix{netip.MustParsePrefix("2001:db8:64::/48"), netip.MustParsePrefix("2001:db8:6400::/40")}}}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, kf := range forms {
			for name, fn := range map[string]func(string) string{"Address": kf.Address, "Client": kf.Client, "Key": kf.Key} {
				once := fn(s)
				if again := fn(once); again != once {
					t.Fatalf("%s(%q) = %q is not a fixed point: %q", name, s, once, again)
				}
				if strings.Count(once, "|") > strings.Count(s, "|") {
					t.Fatalf("%s(%q) = %q adds a key separator", name, s, once)
				}
			}
			if k := kf.Key(s); len(k) > MaxKeyLen || !utf8.ValidString(k) {
				t.Fatalf("Key(%q) = %q: %d bytes, valid UTF-8 %v", s, k, len(k), utf8.ValidString(k))
			}
			// A key the engine made from an address or a client is found
			// again when an operator types it.
			if a := BoundKey(kf.Address(s)); strings.Contains(s, "@") && !strings.Contains(s, "|") {
				if k := kf.Key(a); k != a {
					t.Fatalf("Key(Address(%q) = %q) = %q", s, a, k)
				}
			}
			if c := BoundKey(kf.Client(s)); !strings.ContainsAny(s, "@|") {
				if k := kf.Key(c); k != c {
					t.Fatalf("Key(Client(%q) = %q) = %q", s, c, k)
				}
			}
		}
	})
}

// TestCanonicalKeysOfCanonicalInputDoNotAllocate: the request path keys
// every request; an address already in canonical form (the common case)
// costs no allocation (a concatenation per request made
// BenchmarkRequestPath allocate once per request).
func TestCanonicalKeysOfCanonicalInputDoNotAllocate(t *testing.T) {
	f := DefaultKeyForm()
	for name, fn := range map[string]func() string{
		"Address": func() string { return f.Address("alice@example.org") },
		"user":    func() string { return f.user("alice@example.org") },
	} {
		if n := testing.AllocsPerRun(100, func() { _ = fn() }); n != 0 {
			t.Errorf("%s of a canonical value: %.0f allocations", name, n)
		}
	}
	if got := f.Address("Alice@example.org"); got != "alice@example.org" {
		t.Errorf("Address = %q", got)
	}
}

// BenchmarkCanonicalKeys measures the keys of one request in the common
// spellings: canonical, capitals and an extension, and an IPv6 client.
func BenchmarkCanonicalKeys(b *testing.B) {
	f := DefaultKeyForm()
	b.ReportAllocs()
	for b.Loop() {
		_ = f.Address("alice@example.org")
		_ = f.Address("Alice+news@Example.ORG")
		_ = f.Client("192.0.2.7")
		_ = f.Client("2001:db8:1:1::1")
	}
}
