package policy

import (
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

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	*s = Size(v)
	return err
}

// UnmarshalTOML accepts a bare integer as well as text.
func (s *Size) UnmarshalTOML(v any) error {
	switch x := v.(type) {
	case int64:
		*s = Size(x)
		return nil
	case string:
		return s.UnmarshalText([]byte(x))
	}
	return fmt.Errorf("invalid size %v (use e.g. 10M)", v)
}

// ParseSize parses "123", "512K", "10M", "1G", "2T" (K = 1024 bytes).
func ParseSize(text string) (int64, error) {
	s := strings.TrimSpace(strings.ToUpper(text))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || !(f >= 0) || !(f*float64(mult) <= math.MaxInt64/2) { // NaN fails both
		return 0, fmt.Errorf("invalid size %q (use e.g. 10M)", text)
	}
	return int64(f * float64(mult)), nil
}

// Config is the policy part of the configuration file: what is limited and
// how. It is decoded from TOML (tables [policy], [policy.exempt] and
// [[limit]]) and turned into an Engine by NewEngine, which validates it.
type Config struct {
	// Stages is obsolete and ignored (ConfigAdvice says so): the engine
	// learns the protocol states it is asked at and counts each message
	// once whatever they are. Kept so that old files still load.
	Stages []string `toml:"stages"`
	// SubnetV4 and SubnetV6 are the prefix lengths of the client_subnet
	// key; defaults 24 and 64.
	SubnetV4 int `toml:"subnet_v4"`
	SubnetV6 int `toml:"subnet_v6"`
	// AddressCase is "fold" (default: the local part of addresses is
	// lower-cased in keys) or "keep". See KeyForm.
	AddressCase string `toml:"address_case"`
	// RecipientDelimiter is the set of characters that start an address
	// extension, removed from keys (Postfix's recipient_delimiter);
	// default "+", "" keeps extensions.
	RecipientDelimiter *string `toml:"recipient_delimiter"`
	// IPv4Prefix and IPv6Prefix are the prefix lengths a client_address
	// key is masked to: default 32 (8 to 32) and 64 (32 to 128).
	IPv4Prefix int `toml:"ipv4_prefix"`
	IPv6Prefix int `toml:"ipv6_prefix"`
	// OnFull is the answer to a new sender when the key table is full of
	// keys over or near their limit (the store cannot track it without
	// forgiving an offender): "defer" (default: 450 4.7.1, logged and
	// counted as a fault) or "dunno" (let it through unmeasured).
	OnFull string `toml:"on_full"`
	// DeferOnUnavailable, if not nil, is the error a store outage wraps
	// (redisstore.ErrUnavailable under on_redis_error = defer): a request
	// it leaves undecided is answered 450 4.7.1 instead of DUNNO.
	DeferOnUnavailable error `toml:"-"`
	// OmitMeasures leaves Decision.Measures nil, so that Evaluate does not
	// allocate in the common case (the daemon; simulate wants them).
	OmitMeasures bool `toml:"-"`
	// WarnHeader is the header name a warn limit prepends; empty means
	// warn only logs. Default "X-Ratelimitd-Warning".
	WarnHeader *string `toml:"warn_header"`
	// Exempt lists clients never limited.
	Exempt Exempt `toml:"exempt"`
	// Limits is the stack, in order.
	Limits []LimitConfig `toml:"-"`
}

// Exempt lists who is never limited.
type Exempt struct {
	// Networks are client_address prefixes ("127.0.0.0/8", "2001:db8::/32").
	Networks []string `toml:"networks"`
	// Users are SASL user names (compared case-insensitively).
	Users []string `toml:"users"`
	// Senders are envelope senders ("news@example.org") or whole domains
	// ("@example.org"), compared case-insensitively.
	Senders []string `toml:"senders"`
}

// LimitConfig is one [[limit]] table.
type LimitConfig struct {
	// Name identifies the limit in logs, metrics and the CLI
	// ([a-z0-9_-], unique).
	Name string `toml:"name"`
	// Key lists the request attributes whose values, joined by "|", form
	// the rate key: sasl_username, sender, sender_domain, client_address,
	// client_subnet, client_name, helo_name, recipient, recipient_domain.
	// In TOML a list, or one name as a string.
	Key KeyList `toml:"key"`
	// Limit is the permitted cost per Period and the burst size.
	Limit float64 `toml:"limit"`
	// Period is the averaging period, e.g. "1h", "24h".
	Period Duration `toml:"period"`
	// Per is the cost unit: "mail" (default), "rcpt", "byte", "conn",
	// or "addr": 1 per recipient address the key has not sent to within
	// the period (Exim's per_addr with unique=; see RecipientSets).
	Per string `toml:"per"`
	// Mode is "leaky" (default), "strict", "forgiving" or "readonly".
	Mode string `toml:"mode"`
	// Action when over: "defer" (default), "reject", "warn", "hold",
	// "freeze".
	Action string `toml:"action"`
	// Algorithm is "exponential" (default), "gcra", "cooldown", "earrrl"
	// or "baseline" (relative to the key's own learned peak).
	Algorithm string `toml:"algorithm"`
	// Factor, Floor, Cap and LearnPeriod configure algorithm "baseline"
	// (ratelimit.Baseline) and are refused with any other: a key is
	// refused above Factor (default 3) times its learned typical peak,
	// learned over LearnPeriod (default "4w"), but allowed at least Floor
	// (required; what a key with no history gets) and at most Cap (cost
	// per Period; defaults to Limit, which may then be left out).
	Factor      float64  `toml:"factor"`
	Floor       float64  `toml:"floor"`
	Cap         float64  `toml:"cap"`
	LearnPeriod Duration `toml:"learn_period"`
	// HalfLife is EARRRL's half-life; default Period*ln 2.
	HalfLife Duration `toml:"half_life"`
	// Message is the client text template; placeholders {name}, {key},
	// {rate}, {limit}, {period}, {retry}.
	Message string `toml:"message"`
	// Overrides maps key values to their own limit (cost per Period); a
	// key "@example.org" is the default of every address key (a
	// sasl_username or sender such as "alice@example.org") of that domain
	// that has no entry of its own. E.g. a newsletter sender allowed
	// 5000/day, or "@partner.example" = 500. With algorithm "baseline" an
	// override is the key's fixed allowance (its floor and cap).
	Overrides map[string]float64 `toml:"overrides"`
	// Via lists the front ends whose requests this limit measures:
	// "policy" (Postfix policy delegation, Exim readsocket) and/or
	// "milter". Empty means both. When an MTA asks through both front
	// ends, give each limit one, or it counts every message twice; a
	// freeze limit belongs on the milter (only it can keep the message).
	Via []string `toml:"via"`
	// AutoRelease is "drip" to release a key's held/frozen mail
	// automatically, oldest first at this limit's rate, once the key is
	// back under the limit (unless suspended: ratelimitd quarantine
	// suspend KEY); "" or "none" (default) waits for an operator. Checked
	// and used by the quarantine life cycle, not by the Engine.
	AutoRelease string `toml:"auto_release"`
}

// KeyList is LimitConfig.Key. It decodes from a TOML array of strings
// (key = ["sasl_username", "client_address"]) or from one string
// (key = "sasl_username").
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

// Front ends a limit may be restricted to (LimitConfig.Via); the values of
// Request.Stage.
const (
	ViaPolicy = "policy"
	ViaMilter = "milter"
)

// DefaultMessage is the client text when a limit has none.
const DefaultMessage = "rate limit exceeded: {rate} per {period} (limit {limit}); try again in {retry}"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// keyAttrs are the attributes a limit key may name.
var keyAttrs = []string{"sasl_username", "sender", "sender_domain", "client_address", "client_subnet",
	"client_name", "helo_name", "recipient", "recipient_domain"}

var perNames = []string{"mail", "rcpt", "byte", "conn", "addr"}

// compile validates c and returns the engine's internal form, or every error
// found, each prefixed with its TOML key (joined with errors.Join).
func compile(c Config) (*compiled, error) {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, key, fmt.Sprintf(format, a...)))
	}
	out := &compiled{subnet4: 24, subnet6: 64, warnHeader: "X-Ratelimitd-Warning"}
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
	out.omitMeasures = c.OmitMeasures
	compilePolicy(c, out, bad)
	seen := map[string]bool{}
	for i, lc := range c.Limits {
		at := fmt.Sprintf("limit[%d]", i)
		if lc.Name != "" {
			at = fmt.Sprintf("limit[%d] (%s)", i, lc.Name)
		}
		if !nameRE.MatchString(lc.Name) {
			bad(at+".name", "%q must be 1-64 of a-z, 0-9, _ and -", lc.Name)
		} else if seen[lc.Name] {
			bad(at+".name", "%q is used twice", lc.Name)
		}
		seen[lc.Name] = true
		out.limits = append(out.limits, compileLimit(lc, at, out.form, bad))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// compilePolicy sets out's policy-wide settings from c (subnet sizes, the
// warn header, the exemptions), reporting each error to bad.
func compilePolicy(c Config, out *compiled, bad func(key, format string, a ...any)) {
	if c.SubnetV4 != 0 {
		if c.SubnetV4 < 1 || c.SubnetV4 > 32 {
			bad("policy.subnet_v4", "must be 1..32, got %d", c.SubnetV4)
		}
		out.subnet4 = c.SubnetV4
	}
	if c.SubnetV6 != 0 {
		if c.SubnetV6 < 1 || c.SubnetV6 > 128 {
			bad("policy.subnet_v6", "must be 1..128, got %d", c.SubnetV6)
		}
		out.subnet6 = c.SubnetV6
	}
	if c.WarnHeader != nil {
		out.warnHeader = *c.WarnHeader
		if out.warnHeader != "" && !headerNameRE.MatchString(out.warnHeader) {
			bad("policy.warn_header", "%q is not a header field name", out.warnHeader)
		}
	}
	for i, n := range c.Exempt.Networks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			a, aerr := netip.ParseAddr(n)
			if aerr != nil {
				bad(fmt.Sprintf("policy.exempt.networks[%d]", i), "%q is not an address or prefix", n)
				continue
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out.exemptNets = append(out.exemptNets, p.Masked())
	}
	out.exemptUsers = make(map[string]bool)
	for _, u := range c.Exempt.Users {
		out.exemptUsers[out.form.user(u)] = true
	}
	out.exemptSenders = make(map[string]bool)
	for _, s := range c.Exempt.Senders {
		out.exemptSenders[out.form.Key(s)] = true
	}
}

// compileLimit returns the engine's form of lc, the limit at (its TOML
// key, for errors), reporting each error but a bad or repeated name to
// bad.
func compileLimit(lc LimitConfig, at string, form KeyForm, bad func(key, format string, a ...any)) limit {
	l := limit{name: lc.Name, message: lc.Message, overrides: lc.Overrides}
	if len(lc.Key) == 0 {
		bad(at+".key", "missing (e.g. key = [\"sasl_username\"])")
	}
	for _, k := range lc.Key {
		if !slices.Contains(keyAttrs, k) {
			bad(at+".key", "%v %q (want one of %s)", ErrUnknownKey, k, strings.Join(keyAttrs, ", "))
		}
	}
	l.key = lc.Key
	per := lc.Per
	if per == "" {
		per = "mail"
	}
	l.per = slices.Index(perNames, per)
	if l.per < 0 {
		bad(at+".per", "%v %q (want mail, rcpt, byte, conn or addr)", ErrUnknownPer, lc.Per)
	}
	var err error
	if lc.Mode != "" {
		if l.rl.Mode, err = ratelimit.ParseMode(lc.Mode); err != nil {
			bad(at+".mode", "%v", err)
		}
	}
	if lc.Algorithm != "" {
		if l.rl.Algorithm, err = ratelimit.ParseAlgorithm(lc.Algorithm); err != nil {
			bad(at+".algorithm", "%v", err)
		}
	}
	l.action = Defer
	if lc.Action != "" {
		if l.action, err = ParseAction(lc.Action); err != nil {
			bad(at+".action", "%v", err)
		}
	}
	l.rl.Limit = lc.Limit
	l.rl.Period = time.Duration(lc.Period)
	l.rl.HalfLife = time.Duration(lc.HalfLife)
	compileBaseline(&l.rl, lc, at, bad)
	if err := l.rl.Validate(); err != nil {
		bad(at, "%v", err)
	}
	for k, v := range lc.Overrides {
		if !(v > 0) || math.IsInf(v, 1) {
			bad(at+".overrides."+k, "must be a positive finite limit, got %v", v)
		}
	}
	if len(lc.Overrides) > 0 {
		l.overrides = make(map[string]float64, len(lc.Overrides))
		for k, v := range lc.Overrides {
			// Spellings that fold together keep the stricter value
			// (ConfigAdvice warns).
			ck := form.Key(k)
			if old, ok := l.overrides[ck]; ok {
				v = min(old, v)
			}
			l.overrides[ck] = v
			if strings.HasPrefix(k, "@") {
				l.domainOverrides = true
			}
		}
	}
	for _, v := range lc.Via {
		switch v {
		case ViaPolicy, ViaMilter:
			l.via = append(l.via, v)
		default:
			bad(at+".via", "%q is not policy or milter", v)
		}
	}
	if l.message == "" {
		l.message = DefaultMessage
	}
	return l
}

var headerNameRE = regexp.MustCompile(`^[!-9;-~]+$`)

// compileBaseline sets the baseline parameters of rl from lc: the cap is
// the limit; they are refused with any other algorithm.
func compileBaseline(rl *ratelimit.Limit, lc LimitConfig, at string, bad func(key, format string, a ...any)) {
	if rl.Algorithm != ratelimit.Baseline {
		if lc.Factor != 0 || lc.Floor != 0 || lc.Cap != 0 || lc.LearnPeriod != 0 {
			bad(at, "factor, floor, cap and learn_period need algorithm = \"baseline\"")
		}
		return
	}
	if lc.Cap != 0 {
		if lc.Limit != 0 && lc.Limit != lc.Cap {
			bad(at+".cap", "cap %g and limit %g differ (with baseline, limit is the cap: give one)", lc.Cap, lc.Limit)
		}
		rl.Limit = lc.Cap
	}
	rl.Factor, rl.Floor, rl.LearnPeriod = lc.Factor, lc.Floor, time.Duration(lc.LearnPeriod)
}

// override returns the per-key limit of key: its own entry in overrides,
// else, for a key that is an address (a sasl_username or sender such as
// "alice@example.org"), the entry of its domain ("@example.org"), so a
// domain's users get the domain's default without listing each.
func (l *limit) override(key string) (float64, bool) {
	if len(l.overrides) == 0 {
		return 0, false
	}
	if v, ok := l.overrides[key]; ok {
		return v, true
	}
	if !l.domainOverrides {
		return 0, false
	}
	if i := strings.LastIndexByte(key, '@'); i > 0 && !strings.ContainsRune(key, '|') {
		v, ok := l.overrides[key[i:]]
		return v, ok
	}
	return 0, false
}

// overridden is rl with a per-key override v: the limit, and for a
// baseline limit a fixed allowance (floor and cap v), so a big sender
// named in overrides is held to v whatever its history.
func overridden(rl ratelimit.Limit, v float64) ratelimit.Limit {
	rl.Limit = v
	if rl.Algorithm == ratelimit.Baseline {
		rl.Floor = v
	}
	return rl
}
