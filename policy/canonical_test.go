package policy

import (
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
	{"address", "\"Odd+Quoted\"@example.org", "\"odd+quoted\"@example.org"},
	{"address", "", "<>"},
	{"address", "<>", "<>"},
	{"address", "postmaster", "postmaster"},
	{"client", "192.0.2.7", "192.0.2.7"},
	{"client", "::ffff:192.0.2.7", "192.0.2.7"},
	{"client", "2001:db8:1:1::1", "2001:db8:1:1::/64"},
	{"client", "2001:DB8:1:1:ffff:ffff:ffff:ffff", "2001:db8:1:1::/64"},
	{"client", "fe80::1%eth0", "fe80::/64"},
	{"client", "unknown", "unknown"},
	{"key", "Alice+x@Example.ORG", "alice@example.org"},
	{"key", "Alice+x@Example.ORG|2001:db8:1:1::99", "alice@example.org|2001:db8:1:1::/64"},
	{"key", "@Example.ORG", "@example.org"},
	{"key", "Mail.Example.ORG", "mail.example.org"},
	{"key", "2001:db8:1:1::/64", "2001:db8:1:1::/64"},
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
// folding never adds a key separator, and that nothing panics.
func FuzzCanonicalKey(f *testing.F) {
	for _, c := range canonicalExamples {
		f.Add(c.in)
	}
	f.Add("x'$(id)'@example.org")
	f.Add("ß@İ.example")
	f.Add("anna@Bücher。")
	f.Add("@Ӏ")
	forms := []KeyForm{DefaultKeyForm(), {Delimiters: "+-=", IPv4Prefix: 24, IPv6Prefix: 56}}
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
			// A key the engine made from an address is found again when
			// an operator types it.
			if a := kf.Address(s); strings.Contains(s, "@") && !strings.Contains(s, "|") {
				if k := kf.Key(a); k != a {
					t.Fatalf("Key(Address(%q) = %q) = %q", s, a, k)
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
