package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// KeyForm says how request attributes become rate keys, so one mailbox or
// network is one key however spelt ([policy] address_case and the keys
// after it; docs/keys.md). Sources: Postfix's recipient_delimiter
// (postconf(5)), RFC 5321 2.4, 4.1.2, 4.1.3, RFC 1035 2.3.3, IDNA (RFC
// 5891), inet_aton(3), RFC 6052 (NAT64), RFC 4291 2.5.5, RFC 4380
// (Teredo), RFC 3056 (6to4). Start from DefaultKeyForm.
type KeyForm struct {
	FoldCase               bool   // lower-case local parts; domains always are
	Delimiters             string // start an address extension; "": kept
	IPv4Prefix, IPv6Prefix int    // the bits a client address is keyed by
	// NAT64 are NAT64 prefixes besides 64:ff9b::/96: a client inside one
	// is keyed by the IPv4 address it carries.
	NAT64 []netip.Prefix
}

// DefaultKeyForm folds local parts, removes "+" extensions, keeps IPv4
// addresses whole and IPv6 by /64.
func DefaultKeyForm() KeyForm {
	return KeyForm{FoldCase: true, Delimiters: "+", IPv4Prefix: 32, IPv6Prefix: 64}
}

// NullSender is the key of the null sender (Postfix sends sender=).
const NullSender = "<>"

// InvalidClient is the one key of every malformed numeric client address
// ("192.0.2.15.", "[2001:db8::g]"), so none earns an allowance of its own.
const InvalidClient = "invalid-address"

// MaxKeyLen is the longest rate key, in bytes: two of RFC 5321's longest
// paths (4.5.3.1.3) and a separator fit.
const MaxKeyLen = 512

// hashSuffixLen is the length of "~" and the hexadecimal digest.
const hashSuffixLen = 1 + 32

// BoundKey returns k if it is at most MaxKeyLen bytes, else its first
// bytes (cut at a UTF-8 boundary), "~" and 32 hexadecimal digits of
// SHA-256(k), so distinct long keys stay distinct.
func BoundKey(k string) string {
	if len(k) <= MaxKeyLen {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	n := MaxKeyLen - hashSuffixLen
	for n > 0 && !utf8.RuneStart(k[n]) {
		n--
	}
	return k[:n] + "~" + hex.EncodeToString(sum[:16])
}

// bounded reports whether k has the shape BoundKey gives a long key.
func bounded(k string) bool {
	return len(k) <= MaxKeyLen && len(k) >= MaxKeyLen-utf8.UTFMax-hashSuffixLen && k[len(k)-hashSuffixLen] == '~' &&
		strings.Trim(k[len(k)-hashSuffixLen+1:], "0123456789abcdef") == ""
}

// Address returns the canonical form of an envelope address: brackets and
// source route removed, the local part unquoted (RFC 5321 4.1.2), without
// extension, folded per FoldCase, quoted again if not a dot-string; the
// domain as Domain; "" and "<>" are NullSender.
func (f KeyForm) Address(addr string) string {
	addr = stripPath(strings.TrimSpace(addr))
	if addr == "" || addr == NullSender {
		return NullSender
	}
	raw, domain := addr, ""
	at := strings.LastIndexByte(addr, '@')
	if at >= 0 {
		raw, domain = addr[:at], addr[at+1:]
	}
	local, quoted := unquote(raw)
	if i := strings.IndexAny(local, f.Delimiters); i > 0 {
		local = local[:i]
	}
	if !quoted {
		local = strings.TrimSpace(local)
	}
	if f.FoldCase {
		local = strings.ToLower(local)
	}
	if !dotString(local) && quotable(local) {
		local = `"` + quoter.Replace(local) + `"`
	}
	if at < 0 {
		return local
	}
	return join(addr, local, Domain(domain))
}

// stripPath removes the angle brackets and source route of an RFC 5321
// path ("<@a,@b:user@domain>"), however often repeated.
func stripPath(s string) string {
	for {
		i := strings.IndexByte(s, ':') // the end of a source route
		switch {
		case len(s) >= 2 && s[0] == '<' && s[len(s)-1] == '>':
			s = strings.TrimSpace(s[1 : len(s)-1])
		case len(s) > 1 && s[0] == '@' && i > 0 && !strings.ContainsAny(s[:i], "\"<>") && strings.Contains(s[i+1:], "@"):
			s = strings.TrimSpace(s[i+1:])
		default:
			return s
		}
	}
}

// unquote returns the content of an RFC 5321 quoted-string and true, or s
// and false if s is not one.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s, false
	}
	in := s[1 : len(s)-1]
	if !strings.ContainsAny(in, "\\\"") {
		if !quotable(in) {
			return s, false
		}
		return in, true
	}
	var b strings.Builder
	for i := 0; i < len(in); i++ {
		c := in[i]
		switch {
		case c == '\\' && i+1 < len(in) && in[i+1] >= ' ' && in[i+1] < 0x7f:
			i++
			b.WriteByte(in[i])
		case c == '\\' || c == '"' || c < ' ' || c == 0x7f:
			return s, false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// quotable reports whether local has no control character.
func quotable(local string) bool {
	return !strings.ContainsFunc(local, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// quoter escapes " and \ in an RFC 5321 quoted-string.
var quoter = strings.NewReplacer(`"`, `\"`, `\`, `\\`)

// dotString reports whether s is an RFC 5321 Dot-string (RFC 6531 UTF-8
// allowed), which needs no quotes.
func dotString(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ { // from 0x80 on, UTF-8: its validity is the MTA's
		if c := s[i]; c < 0x80 && !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte(".!#$%&'*+-/=?^_`{|}~", c) >= 0) {
			return false
		}
	}
	return true
}

// Domain returns a domain lower-cased, without trailing dots, in IDNA
// ASCII ("xn--bcher-kva.example"); names IDNA refuses only lower-cased.
func Domain(d string) string {
	d = strings.TrimLeftFunc(d, unicode.IsSpace)
	d = strings.TrimRightFunc(d, func(r rune) bool { return r == '.' || unicode.IsSpace(r) })
	d = strings.ToLower(d)
	// IDNA after lower-casing: the key does not depend on the case.
	if strings.ContainsFunc(d, func(r rune) bool { return r >= utf8.RuneSelf }) {
		if a, err := idna.Lookup.ToASCII(d); err == nil && a != "" {
			return strings.TrimRight(strings.ToLower(a), ".") // "。" maps to "."
		}
	}
	return d
}

// Client returns the key of a client address in any form an MTA writes it
// ("[2001:db8::1]", "IPv6:2001:db8::1", "3221225993"): the IPv4 address a
// transition address carries, masked to IPv4Prefix or IPv6Prefix bits;
// InvalidClient for a malformed numeric form, else lower-cased.
func (f KeyForm) Client(addr string) string {
	s := strings.TrimSpace(addr)
	if a, ok := parseClient(s); ok {
		return f.prefix(f.carried(a), 128)
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return f.prefix(p.Addr(), p.Bits())
	}
	if numeric(s) {
		return InvalidClient
	}
	return strings.ToLower(s)
}

// parseClient parses s as netip does, without the brackets and "IPv6:"
// tag of an RFC 5321 address literal (4.1.3), else as inet_aton(3).
func parseClient(s string) (netip.Addr, bool) {
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		s = s[1 : len(s)-1]
	}
	if len(s) > 5 && strings.EqualFold(s[:5], "ipv6:") {
		a, err := netip.ParseAddr(s[5:])
		return a, err == nil && a.Is6()
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a, true
	}
	return inetAton(s)
}

// inetAton parses s as glibc's inet_aton(3) does, without trailing text:
// "a.b.c.d", "a.b.c", "a.b" or "a", each part decimal, 0 octal or 0x hex.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 || s == "" {
		return netip.Addr{}, false
	}
	var u uint64
	for i, p := range parts {
		base, digits := 10, p
		switch {
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		shift, bits := 24-8*i, 8 // a byte; the last part fills the rest
		if i == len(parts)-1 {
			shift, bits = 0, 32-8*i
		}
		n, err := strconv.ParseUint(digits, base, 32)
		if err != nil || n >= 1<<bits {
			return netip.Addr{}, false
		}
		u |= n << shift
	}
	return netip.AddrFrom4([4]byte{byte(u >> 24), byte(u >> 16), byte(u >> 8), byte(u)}), true
}

// numeric reports whether s is an address literal or made only of what
// one holds, so a failure to parse it is a malformed address, not a name.
func numeric(s string) bool {
	return len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' || len(s) >= 5 && strings.EqualFold(s[:5], "ipv6:") ||
		s != "" && strings.Trim(s, "0123456789abcdefABCDEF.:xX") == ""
}

// nat64WellKnown is RFC 6052's well-known prefix.
var nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")

// carried returns the IPv4 address an IPv6 transition address carries
// (mapped, compatible, NAT64, Teredo's client, 6to4), else a unzoned.
func (f KeyForm) carried(a netip.Addr) netip.Addr {
	a = a.Unmap().WithZone("")
	if !a.Is6() {
		return a
	}
	b := a.As16()
	for _, p := range f.NAT64 {
		if p.Contains(a) {
			return nat64IPv4(b, p.Bits())
		}
	}
	switch {
	case nat64WellKnown.Contains(a):
		return nat64IPv4(b, 96)
	case b == [16]byte{12: b[12], 13: b[13], 14: b[14], 15: b[15]} && b[12] != 0:
		return netip.AddrFrom4([4]byte(b[12:16])) // IPv4-compatible
	case b[0] == 0x20 && b[1] == 0x01 && b[2] == 0 && b[3] == 0: // Teredo: the client, obfuscated
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})
	case b[0] == 0x20 && b[1] == 0x02:
		return netip.AddrFrom4([4]byte(b[2:6])) // 6to4
	}
	return a
}

// nat64IPv4 extracts the IPv4 address of an IPv4-embedded IPv6 address
// under a prefix of bits bits (RFC 6052 2.2: bits 64 to 71 skipped).
func nat64IPv4(b [16]byte, bits int) netip.Addr {
	var v4 [4]byte
	i := bits / 8
	for n := 0; n < 4; i++ {
		if i == 8 {
			continue
		}
		v4[n] = b[i]
		n++
	}
	return netip.AddrFrom4(v4)
}

func (f KeyForm) prefix(a netip.Addr, maxBits int) string {
	a = a.Unmap().WithZone("")
	bits, full := f.IPv6Prefix, 128
	if a.Is4() {
		bits, full = f.IPv4Prefix, 32
		if maxBits == 128 {
			maxBits = 32
		}
	} else if maxBits == 128 && (a.IsUnspecified() || a.IsLoopback()) {
		return a.String()
	}
	bits = max(min(bits, maxBits), 0)
	if bits >= full {
		return a.String()
	}
	p, _ := a.Prefix(bits) // a is valid, 0 <= bits < full
	return p.String()
}

// Key returns the canonical form of a key an operator typed (rate show,
// reset, overrides, exemptions): each "|" part as a client, an address,
// "@domain" or lower-cased, bounded by BoundKey. Key(Key(k)) == Key(k).
func (f KeyForm) Key(k string) string {
	if bounded(k) {
		return k
	}
	parts := strings.Split(k, "|")
	for i, p := range parts {
		parts[i] = f.part(p)
	}
	return BoundKey(strings.Join(parts, "|"))
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
	// Not inet_aton's short forms: an operator's "1234" (a login) is no address.
	_, err := netip.ParsePrefix(p)
	if a, ok := parseClient(p); err == nil || ok && (!a.Is4() || strings.Count(p, ".") == 3 || strings.Contains(p, ":")) {
		return f.Client(p)
	}
	return strings.ToLower(p)
}

// user returns a SASL login's key: lower-cased, domain canonical,
// extension kept.
func (f KeyForm) user(u string) string {
	if i := strings.LastIndexByte(u, '@'); i >= 0 {
		return join(u, strings.ToLower(u[:i]), Domain(u[i+1:]))
	}
	return strings.ToLower(u)
}

// join returns local@domain, orig itself when unchanged (no allocation).
func join(orig, local, domain string) string {
	if len(local)+1+len(domain) == len(orig) && strings.HasPrefix(orig, local) &&
		orig[len(local)] == '@' && strings.HasSuffix(orig, domain) {
		return orig
	}
	return local + "@" + domain
}

// keyForm returns the key form c configures, reporting bad values to bad.
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
		if strings.ContainsFunc(f.Delimiters, func(r rune) bool {
			return r <= ' ' || r >= 0x7f || strings.ContainsRune("@|\"'<>", r)
		}) {
			bad("policy.recipient_delimiter", "%q: a delimiter must be printable ASCII other than @, |, quotes, <, > and space", f.Delimiters)
		}
	}
	setInt(bad, "policy.ipv4_prefix", c.IPv4Prefix, 8, 32, &f.IPv4Prefix)
	setInt(bad, "policy.ipv6_prefix", c.IPv6Prefix, 32, 128, &f.IPv6Prefix)
	for i, n := range c.NAT64Prefixes {
		p, err := netip.ParsePrefix(n)
		switch {
		case err != nil || !p.Addr().Is6() || p.Addr().Is4In6():
			bad(fmt.Sprintf("policy.nat64_prefixes[%d]", i), "%q is not an IPv6 prefix", n)
		case !slices.Contains([]int{32, 40, 48, 56, 64, 96}, p.Bits()):
			bad(fmt.Sprintf("policy.nat64_prefixes[%d]", i), "%q: a NAT64 prefix is /32, /40, /48, /56, /64 or /96 (RFC 6052 2.2)", n)
		default:
			f.NAT64 = append(f.NAT64, p.Masked())
		}
	}
	return f
}

// foldedOverrides warns of override keys of lc that fold into one.
func foldedOverrides(lc LimitConfig, f KeyForm) []string {
	seen := make(map[string]string, len(lc.Overrides))
	var out []string
	for _, k := range slices.Sorted(maps.Keys(lc.Overrides)) {
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
