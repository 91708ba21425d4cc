package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Duration is a time.Duration that decodes from TOML text such as "90s",
// "1h", "1h30m" or, beyond time.ParseDuration, "2d" and "1w".
type Duration time.Duration

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := human.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(human.Duration(time.Duration(d))), nil }

// Size is a byte count that decodes from TOML as an integer or as text with
// a binary suffix: "512K", "10M", "1G" (powers of 1024).
type Size int64

// UnmarshalTOML implements BurntSushi/toml's Unmarshaler: an integer or
// text as ParseSize reads it.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		*s = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		*s = Size(n)
		return err
	}
	return fmt.Errorf("invalid size %v (use e.g. 10M)", v)
}

// ParseSize parses "123", "512K", "10M", "1G", "2T" (K = 1024 bytes).
func ParseSize(text string) (int64, error) {
	s := strings.TrimSpace(strings.ToUpper(text))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := int64(1)
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KMGT", s[n-1]); i >= 0 {
			mult, s = 1<<(10*(i+1)), s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0) || !(f*float64(mult) <= math.MaxInt64/2) { // NaN fails both
		return 0, fmt.Errorf("invalid size %q (use e.g. 10M)", text)
	}
	return int64(f * float64(mult)), nil
}

// Config is the policy part of the configuration file ([policy],
// [policy.exempt], [[limit]]), documented in docs/configuration.md.
type Config struct {
	SubnetV4           int      `toml:"subnet_v4"`
	SubnetV6           int      `toml:"subnet_v6"`
	AddressCase        string   `toml:"address_case"`
	RecipientDelimiter *string  `toml:"recipient_delimiter"`
	IPv4Prefix         int      `toml:"ipv4_prefix"`
	IPv6Prefix         int      `toml:"ipv6_prefix"`
	NAT64Prefixes      []string `toml:"nat64_prefixes"`
	OnFull             string   `toml:"on_full"`
	WarnHeader         *string  `toml:"warn_header"`
	Exempt             Exempt   `toml:"exempt"`
	// DeferOnUnavailable, if not nil, is the error a store outage wraps: a
	// request it leaves undecided is answered 450 4.7.1, not DUNNO.
	DeferOnUnavailable error `toml:"-"`
	// OmitMeasures leaves Decision.Measures nil (no allocation).
	OmitMeasures bool          `toml:"-"`
	Limits       []LimitConfig `toml:"-"` // the stack, in order
}

// Exempt lists who is never limited: client prefixes, SASL users, senders
// or "@domain"s (case-insensitive).
type Exempt struct {
	Networks []string `toml:"networks"`
	Users    []string `toml:"users"`
	Senders  []string `toml:"senders"`
}

// LimitConfig is one [[limit]] table.
type LimitConfig struct {
	Name        string             `toml:"name"`
	Key         KeyList            `toml:"key"`
	Limit       float64            `toml:"limit"` // cost per Period, also the burst
	Period      Duration           `toml:"period"`
	Per         string             `toml:"per"`
	Mode        string             `toml:"mode"`
	Action      string             `toml:"action"`
	Algorithm   string             `toml:"algorithm"`
	Factor      float64            `toml:"factor"` // Factor, Floor, Cap, LearnPeriod: baseline only
	Floor       float64            `toml:"floor"`
	Cap         float64            `toml:"cap"`
	LearnPeriod Duration           `toml:"learn_period"`
	HalfLife    Duration           `toml:"half_life"`
	Message     string             `toml:"message"`
	Overrides   map[string]float64 `toml:"overrides"`
	Via         []string           `toml:"via"`
	AutoRelease string             `toml:"auto_release"` // used by the quarantine life cycle
	Ratio       float64            `toml:"ratio"`        // Ratio, MinCount: an outcome limit's ratio form
	MinCount    float64            `toml:"min_count"`
}

// KeyList is LimitConfig.Key: a TOML list of names, or one string.
type KeyList []string

// UnmarshalTOML implements BurntSushi/toml's Unmarshaler.
func (k *KeyList) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case string:
		*k = KeyList{x}
		return nil
	case []any:
		out := make(KeyList, len(x))
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				return fmt.Errorf("key[%d] must be a string like \"sasl_username\", not %T", i, e)
			}
			out[i] = s
		}
		*k = out
		return nil
	}
	return fmt.Errorf("key must be a string or a list of strings, e.g. key = \"sasl_username\", not %T", v)
}

// Front ends a limit may be restricted to: the values of Request.Stage.
const (
	ViaPolicy = "policy"
	ViaMilter = "milter"
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// keyAttrs are the attributes a limit key may name.
var keyAttrs = []string{"sasl_username", "sender", "sender_domain", "client_address", "client_subnet",
	"client_name", "helo_name", "recipient", "recipient_domain", "local_user"}

var perNames = []string{"mail", "rcpt", "byte", "conn", "addr", "bounce", "unknown_rcpt", "deferral"}

// compile validates c into the engine's form, or returns every error,
// each prefixed with its TOML key.
func compile(c Config) (*compiled, error) {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, key, fmt.Sprintf(format, a...)))
	}
	out := &compiled{subnet4: 24, subnet6: 64, warnHeader: "X-Ratelimitd-Warning", omitMeasures: c.OmitMeasures}
	out.form = c.keyForm(bad)
	switch c.OnFull {
	case "", "defer":
		out.faults = append(out.faults, storeFault{ErrKeyTableFull, "Too many senders are being tracked; try again later",
			"key table full of keys over or near their limit: a new key cannot be tracked (policy.on_full = defer)"})
	case "dunno":
	default:
		bad("policy.on_full", "%q is not defer or dunno", c.OnFull)
	}
	if c.DeferOnUnavailable != nil {
		out.faults = append(out.faults, storeFault{c.DeferOnUnavailable, "Rate limit service temporarily unavailable, try again later",
			"rate store unavailable (store.on_redis_error = defer)"})
	}
	setInt(bad, "policy.subnet_v4", c.SubnetV4, 1, 32, &out.subnet4)
	setInt(bad, "policy.subnet_v6", c.SubnetV6, 1, 128, &out.subnet6)
	if c.WarnHeader != nil {
		out.warnHeader = *c.WarnHeader
		if out.warnHeader != "" && !headerNameRE.MatchString(out.warnHeader) {
			bad("policy.warn_header", "%q is not a header field name", out.warnHeader)
		}
	}
	for i, n := range c.Exempt.Networks {
		p, err := ParsePrefix(n)
		if err != nil {
			bad(fmt.Sprintf("policy.exempt.networks[%d]", i), "%q is not an address or prefix", n)
			continue
		}
		out.exemptNets = append(out.exemptNets, p)
	}
	out.exemptUsers = make(map[string]bool)
	for _, u := range c.Exempt.Users {
		out.exemptUsers[out.form.user(u)] = true
	}
	out.exemptSenders = make(map[string]bool)
	for _, s := range c.Exempt.Senders {
		out.exemptSenders[out.form.Key(s)] = true
	}
	for i, lc := range c.Limits {
		at := fmt.Sprintf("limit[%d]", i)
		if lc.Name != "" {
			at = fmt.Sprintf("limit[%d] (%s)", i, lc.Name)
		}
		if !nameRE.MatchString(lc.Name) {
			bad(at+".name", "%q must be 1-64 of a-z, 0-9, _ and -", lc.Name)
		} else if slices.ContainsFunc(out.limits, func(o limit) bool { return o.name == lc.Name }) {
			bad(at+".name", "%q is used twice", lc.Name)
		}
		out.limits = append(out.limits, compileLimit(lc, i, at, out.form, bad))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// ParsePrefix parses an address or prefix ("192.0.2.1", "2001:db8::/32")
// as a prefix with its host bits cleared; an address is a /32 or /128.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// setInt sets *dst to v unless v is 0 (the default), which must be in
// lo..hi.
func setInt(bad func(key, format string, a ...any), key string, v, lo, hi int, dst *int) {
	if v == 0 {
		return
	}
	if v < lo || v > hi {
		bad(key, "must be %d..%d, got %d", lo, hi, v)
	}
	*dst = v
}

// compileLimit returns the engine's form of lc, idx in the stack (at: its
// TOML key).
func compileLimit(lc LimitConfig, idx int, at string, form KeyForm, bad func(key, format string, a ...any)) limit {
	l := limit{name: lc.Name, idx: idx, key: lc.Key, message: lc.Message, overrides: lc.Overrides}
	if len(lc.Key) == 0 {
		bad(at+".key", "missing (e.g. key = [\"sasl_username\"])")
	}
	for _, k := range lc.Key {
		if !slices.Contains(keyAttrs, k) {
			bad(at+".key", "unknown key attribute %q (want one of %s)", k, strings.Join(keyAttrs, ", "))
		}
	}
	if l.per = slices.Index(perNames, cmp.Or(lc.Per, "mail")); l.per < 0 {
		bad(at+".per", "unknown cost unit %q (want mail, rcpt, byte, conn, addr, bounce, unknown_rcpt or deferral)", lc.Per)
	}
	var err error
	if l.rl.Mode, err = ratelimit.ParseMode(cmp.Or(lc.Mode, "leaky")); err != nil {
		bad(at+".mode", "%v", err)
	}
	if l.rl.Algorithm, err = ratelimit.ParseAlgorithm(cmp.Or(lc.Algorithm, "exponential")); err != nil {
		bad(at+".algorithm", "%v", err)
	}
	if l.action, err = ParseAction(cmp.Or(lc.Action, "defer")); err != nil {
		bad(at+".action", "%v", err)
	}
	l.rl.Limit, l.rl.Period, l.rl.HalfLife = lc.Limit, time.Duration(lc.Period), time.Duration(lc.HalfLife)
	if l.rl.Algorithm == ratelimit.Baseline { // cap = limit
		if lc.Cap != 0 && lc.Limit != 0 && lc.Limit != lc.Cap {
			bad(at+".cap", "cap %g and limit %g differ (with baseline, limit is the cap: give one)", lc.Cap, lc.Limit)
		}
		l.rl.Limit = cmp.Or(lc.Cap, lc.Limit)
		l.rl.Factor, l.rl.Floor, l.rl.LearnPeriod = lc.Factor, lc.Floor, time.Duration(lc.LearnPeriod)
	} else if lc.Factor != 0 || lc.Floor != 0 || lc.Cap != 0 || lc.LearnPeriod != 0 {
		bad(at, "factor, floor, cap and learn_period need algorithm = \"baseline\"")
	}
	if lc.Ratio != 0 || lc.MinCount != 0 {
		l.compileRatio(lc, at, bad)
	}
	if err := l.rl.Validate(); err != nil {
		bad(at, "%v", err)
	}
	if len(lc.Overrides) > 0 {
		l.overrides = make(map[string]float64, len(lc.Overrides))
	}
	for k, v := range lc.Overrides {
		if !(v > 0) || math.IsInf(v, 1) {
			bad(at+".overrides."+k, "must be a positive finite limit, got %v", v)
		}
		ck := form.Key(k) // spellings folded together keep the lower value
		if old, ok := l.overrides[ck]; ok {
			v = min(old, v)
		}
		l.overrides[ck] = v
		l.domainOverrides = l.domainOverrides || strings.HasPrefix(k, "@")
	}
	switch lc.AutoRelease {
	case "", "none":
	case "drip":
		if l.action != Hold && l.action != Freeze {
			bad(at+".auto_release", "\"drip\" needs action \"hold\" or \"freeze\"")
		}
	default:
		bad(at+".auto_release", "%q is neither \"drip\" nor \"none\"", lc.AutoRelease)
	}
	for _, v := range lc.Via {
		switch v {
		case ViaPolicy, ViaMilter:
			l.via = append(l.via, v)
		default:
			bad(at+".via", "%q is not policy or milter", v)
		}
	}
	switch { // the client text of a limit without one (a ratio's: compileRatio)
	case l.message == "" && l.outcome():
		l.message = "too many of your recent recipients failed (limit {limit} per {period}); try again in {retry}"
	case l.message == "":
		l.message = "rate limit exceeded: {rate} per {period} (limit {limit}); try again in {retry}"
	}
	return l
}

var headerNameRE = regexp.MustCompile(`^[!-9;-~]+$`)

// params is l's arithmetic for key: with key's own override, else its
// "@domain" one (for baseline, floor and cap).
func (l *limit) params(key string) ratelimit.Limit {
	rl := l.rl
	v, ok := l.overrides[key]
	if i := strings.LastIndexByte(key, '@'); !ok && l.domainOverrides && i > 0 && !strings.ContainsRune(key, '|') {
		v, ok = l.overrides[key[i:]]
	}
	if ok {
		rl.Limit = v
		if rl.Algorithm == ratelimit.Baseline {
			rl.Floor = v
		}
	}
	return rl
}
