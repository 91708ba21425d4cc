package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
)

// KeyForm says how request attributes become rate keys, so one mailbox or
// network is one key however spelt ([policy] address_case,
// recipient_delimiter, ipv4_prefix, ipv6_prefix; start from
// DefaultKeyForm). The rules follow Postfix's recipient_delimiter
// (postconf(5)), Exim's ${lc:} and ${mask:} (Exim specification, "Access
// control lists"), RFC 5321 2.4, RFC 1035 2.3.3 and IDNA (RFC 5891).
type KeyForm struct {
	// FoldCase lower-cases local parts ("fold"); domains always are.
	FoldCase bool
	// Delimiters start an address extension (recipient_delimiter); "":
	// extensions kept.
	Delimiters string
	// IPv4Prefix and IPv6Prefix are the bits a client address is keyed by
	// (RFC 6177 for /64).
	IPv4Prefix, IPv6Prefix int
}

// DefaultKeyForm folds local parts, removes "+" extensions, keeps IPv4
// addresses whole and IPv6 by /64.
func DefaultKeyForm() KeyForm {
	return KeyForm{FoldCase: true, Delimiters: "+", IPv4Prefix: 32, IPv6Prefix: 64}
}

// NullSender is the key of the null sender (Postfix sends sender=).
const NullSender = "<>"

// Address returns the canonical form of an envelope address: domain
// lower-cased in IDNA ASCII, local part lower-cased unless FoldCase is off,
// extension removed, spaces trimmed; "" and "<>" are NullSender. Safe for
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

// Domain returns a domain lower-cased, without trailing dots, in IDNA
// ASCII ("xn--bcher-kva.example"); names IDNA refuses only lower-cased.
func Domain(d string) string {
	d = strings.TrimLeftFunc(d, unicode.IsSpace)
	d = strings.TrimRightFunc(d, func(r rune) bool { return r == '.' || unicode.IsSpace(r) })
	d = strings.ToLower(d)
	for i := 0; i < len(d); i++ {
		if d[i] >= 0x80 {
			// Lower-cased first, so the key does not depend on the case.
			if a, err := idna.Lookup.ToASCII(d); err == nil && a != "" {
				return strings.TrimRight(strings.ToLower(a), ".") // "。" maps to "."
			}
			break
		}
	}
	return d
}

// Client returns the key of a client address: masked to IPv4Prefix or
// IPv6Prefix bits (IPv4-mapped as IPv4), bare at full length, else a
// prefix; no zone; a non-address lower-cased.
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

// Key returns the canonical form of a key an operator typed (rate show,
// reset, overrides, exemptions): each "|" part as a client, an address
// ("@domain" kept), or lower-cased. Key(Key(k)) == Key(k).
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

// user returns a SASL login's key: lower-cased, domain canonical,
// extension kept (the login is authenticated).
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

// foldedOverrides warns of override keys of lc that fold into one.
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
