package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
)

// KeyForm says how request attributes become rate keys, so that one
// mailbox or one customer network is one key however it is spelt. The zero
// value is not useful; start from DefaultKeyForm. It is configured by
// [policy] address_case, recipient_delimiter, ipv4_prefix and ipv6_prefix.
//
// The rules follow what MTAs already do: Postfix's recipient_delimiter
// (postconf(5)) splits an address extension off the local part; Exim's
// ACLs key rates on ${lc:...} and ${mask:...} (Exim specification, chapter
// "Access control lists", the ratelimit condition); RFC 5321 section 2.4
// leaves the local part's case to the receiving host, and the domain is
// case-insensitive (RFC 1035 section 2.3.3) and written in its IDNA ASCII
// form (RFC 5891).
type KeyForm struct {
	// FoldCase lower-cases the local part of addresses ("fold", the
	// default); false keeps it as sent ("keep"). Domains are always
	// lower-cased.
	FoldCase bool
	// Delimiters is the set of characters that start an address
	// extension, as Postfix's recipient_delimiter: "alice+news" is
	// "alice" with "+". Empty keeps extensions.
	Delimiters string
	// IPv4Prefix and IPv6Prefix are the prefix lengths (bits) a client
	// address is keyed by: 32 (an IPv4 address is itself) and 64 (one
	// IPv6 customer network, RFC 6177).
	IPv4Prefix, IPv6Prefix int
}

// DefaultKeyForm is the key form of a configuration that says nothing:
// local parts folded, "+" extensions removed, IPv4 by address, IPv6 by
// /64.
func DefaultKeyForm() KeyForm {
	return KeyForm{FoldCase: true, Delimiters: "+", IPv4Prefix: 32, IPv6Prefix: 64}
}

// NullSender is the key of the null envelope sender (bounces, MAIL
// FROM:<>), which Postfix's policy delegation sends as an empty sender=.
const NullSender = "<>"

// Address returns the canonical form of an envelope address: the domain
// lower-cased in its IDNA ASCII form (a domain IDNA refuses is only
// lower-cased), the local part lower-cased unless FoldCase is off, the
// address extension removed (from the first delimiter on, unless the local
// part starts with it), surrounding spaces dropped. The null
// sender ("" or "<>") is NullSender. An address without "@" is a bare
// local part and is treated as one. Address never fails and is safe for
// concurrent use.
func (f KeyForm) Address(addr string) string {
	addr = strings.TrimSpace(addr)
	if addr == "" || addr == NullSender {
		return NullSender
	}
	local, domain := addr, ""
	at := strings.LastIndexByte(addr, '@')
	if at >= 0 {
		local, domain = addr[:at], addr[at+1:]
	}
	if f.Delimiters != "" && !strings.HasPrefix(local, "\"") {
		if i := strings.IndexAny(local, f.Delimiters); i > 0 {
			local = local[:i]
		}
	}
	local = strings.TrimSpace(local)
	if f.FoldCase {
		local = strings.ToLower(local)
	}
	if at < 0 {
		return local
	}
	return join(addr, local, Domain(domain))
}

// Domain returns the canonical form of a domain name: lower-case, without
// trailing dots or spaces, in IDNA ASCII form ("Bücher.Example" is
// "xn--bcher-kva.example"); a name IDNA refuses (underscores, a literal
// "[192.0.2.1]") is only lower-cased. It is safe for concurrent use.
func Domain(d string) string {
	d = strings.TrimLeftFunc(d, unicode.IsSpace)
	d = strings.TrimRightFunc(d, func(r rune) bool { return r == '.' || unicode.IsSpace(r) })
	d = strings.ToLower(d)
	for i := 0; i < len(d); i++ {
		if d[i] >= 0x80 {
			// Lower-cased first: a name IDNA refuses in one case it
			// may take in the other, and the key must not depend on it.
			if a, err := idna.Lookup.ToASCII(d); err == nil && a != "" {
				return strings.TrimRight(strings.ToLower(a), ".") // "。" maps to "."
			}
			break
		}
	}
	return d
}

// Client returns the canonical key of a client IP address: an IPv4
// address (or an IPv4-mapped IPv6 address) masked to IPv4Prefix bits and
// an IPv6 address masked to IPv6Prefix bits, written as the bare address
// at full length ("192.0.2.7") and as a prefix otherwise
// ("2001:db8:1:1::/64"). A zone is dropped. A value that is not an address
// (Postfix's "unknown") is returned lower-cased. It is safe for concurrent
// use.
func (f KeyForm) Client(addr string) string {
	a, err := netip.ParseAddr(strings.TrimSpace(addr))
	if err != nil {
		if p, perr := netip.ParsePrefix(strings.TrimSpace(addr)); perr == nil {
			return f.prefix(p.Addr(), p.Bits())
		}
		return strings.ToLower(addr)
	}
	return f.prefix(a, 128)
}

func (f KeyForm) prefix(a netip.Addr, maxBits int) string {
	a = a.Unmap().WithZone("")
	bits := f.IPv6Prefix
	full := 128
	if a.Is4() {
		bits, full = f.IPv4Prefix, 32
		if maxBits == 128 {
			maxBits = 32
		}
	}
	bits = max(min(bits, maxBits), 0)
	if bits >= full {
		return a.String()
	}
	p, err := a.Prefix(bits)
	if err != nil {
		return a.String()
	}
	return p.String()
}

// Key returns the canonical form of a rate key an operator typed (rate
// show, rate reset, an override, an exemption): each "|"-separated part is
// made canonical by what it looks like: an IP address or prefix as a
// client (Client), a part with "@" as an address (Address; a lone
// "@domain" override as "@" and the canonical domain), anything else
// (a SASL user name without a domain, a domain, a HELO name) lower-cased.
// Canonical keys are fixed points: Key(Key(k)) == Key(k).
func (f KeyForm) Key(k string) string {
	if !strings.Contains(k, "|") {
		return f.part(k)
	}
	parts := strings.Split(k, "|")
	for i, p := range parts {
		parts[i] = f.part(p)
	}
	return strings.Join(parts, "|")
}

func (f KeyForm) part(p string) string {
	switch {
	case p == "" || p == NullSender:
		return p
	case p[0] == '@' && strings.IndexByte(p[1:], '@') < 0:
		return "@" + Domain(p[1:])
	case strings.Contains(p, "@"):
		return f.Address(p)
	}
	if _, err := netip.ParseAddr(p); err == nil {
		return f.Client(p)
	}
	if _, err := netip.ParsePrefix(p); err == nil {
		return f.Client(p)
	}
	return strings.ToLower(p)
}

// user returns the key of a SASL user name: lower-cased, with the domain
// of a user@domain login in canonical form. Unlike envelope addresses, an
// extension is not removed: the login is authenticated, and some sites
// give "a+b" its own mailbox.
func (f KeyForm) user(u string) string {
	if i := strings.LastIndexByte(u, '@'); i >= 0 {
		return join(u, strings.ToLower(u[:i]), Domain(u[i+1:]))
	}
	return strings.ToLower(u)
}

// join returns local + "@" + domain, which is orig itself when nothing
// changed (the common case on the request path: no allocation).
func join(orig, local, domain string) string {
	if len(local)+1+len(domain) == len(orig) && strings.HasPrefix(orig, local) &&
		orig[len(local)] == '@' && strings.HasSuffix(orig, domain) {
		return orig
	}
	return local + "@" + domain
}

// keyForm returns the key form c configures, reporting bad values with
// bad (their accepted ranges: address_case fold or keep; a delimiter
// set of printable ASCII other than "@", "|", quotes and space;
// ipv4_prefix 8 to 32; ipv6_prefix 32 to 128).
func (c Config) keyForm(bad func(key, format string, a ...any)) KeyForm {
	f := DefaultKeyForm()
	switch c.AddressCase {
	case "", "fold":
	case "keep":
		f.FoldCase = false
	default:
		bad("policy.address_case", "%q is not fold or keep", c.AddressCase)
	}
	if c.RecipientDelimiter != nil {
		f.Delimiters = *c.RecipientDelimiter
		for _, r := range f.Delimiters {
			if r <= ' ' || r >= 0x7f || strings.ContainsRune("@|\"'<>", r) {
				bad("policy.recipient_delimiter", "%q: a delimiter must be printable ASCII other than @, |, quotes, <, > and space", f.Delimiters)
				break
			}
		}
	}
	if c.IPv4Prefix != 0 {
		if c.IPv4Prefix < 8 || c.IPv4Prefix > 32 {
			bad("policy.ipv4_prefix", "must be 8..32, got %d", c.IPv4Prefix)
		}
		f.IPv4Prefix = c.IPv4Prefix
	}
	if c.IPv6Prefix != 0 {
		if c.IPv6Prefix < 32 || c.IPv6Prefix > 128 {
			bad("policy.ipv6_prefix", "must be 32..128, got %d", c.IPv6Prefix)
		}
		f.IPv6Prefix = c.IPv6Prefix
	}
	return f
}

// foldedOverrides returns a warning for each pair of override keys of lc
// that are one key in canonical form f (the stricter value is used).
func foldedOverrides(lc LimitConfig, f KeyForm) []string {
	seen := make(map[string]string, len(lc.Overrides))
	keys := make([]string, 0, len(lc.Overrides))
	for k := range lc.Overrides {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		ck := f.Key(k)
		if first, ok := seen[ck]; ok {
			out = append(out, fmt.Sprintf("limit %s: overrides %q and %q are the same key %q once folded "+
				"(address_case, recipient_delimiter, ipv6_prefix); the lower value, %g, applies",
				lc.Name, first, k, ck, min(lc.Overrides[first], lc.Overrides[k])))
			continue
		}
		seen[ck] = k
	}
	return out
}
