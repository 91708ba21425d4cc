package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

// negativeDurations returns an error for every duration key of f set to a
// negative value, wherever it is in the file: a negative timeout, interval
// or age is never meaningful (0 means the key's default).
func negativeDurations(f *File) []error {
	var errs []error
	walkValues(reflect.ValueOf(f).Elem(), "", func(key string, v reflect.Value) {
		if d, ok := v.Interface().(policy.Duration); ok && d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s (0 or leaving it out means the default)", key, time.Duration(d)))
		}
	})
	return errs
}

// walkValues calls fn for every leaf value of the struct v, named as in
// FileKeys ("server.idle_timeout", "limit[2].period").
func walkValues(v reflect.Value, prefix string, fn func(key string, v reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		if f.Anonymous && f.Tag.Get("toml") == "" {
			walkValues(fv, prefix, fn)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			if f.Name != "Limits" {
				continue
			}
			name = "limit"
		}
		switch {
		case fv.Kind() == reflect.Struct && !leafTypes[fv.Type()] && fv.Type() != reflect.TypeFor[policy.Duration]():
			walkValues(fv, prefix+name+".", fn)
		case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.Struct:
			for j := range fv.Len() {
				walkValues(fv.Index(j), fmt.Sprintf("%s%s[%d].", prefix, name, j), fn)
			}
		default:
			fn(prefix+name, fv)
		}
	}
}

// Warnings returns, in plain words, the settings of f that are valid but
// do nothing as written: limits no front end can reach, and a max_keys the
// store rounds. `config check` prints them and the daemon logs them at
// WARN at start and reload.
func (f *File) Warnings() []string {
	var out []string
	milter := f.Milter.Listen != ""
	for _, l := range f.Limits {
		viaMilter := len(l.Via) == 0 || slices.Contains(l.Via, policy.ViaMilter)
		viaPolicy := len(l.Via) == 0 || slices.Contains(l.Via, policy.ViaPolicy)
		switch {
		case !milter && !viaPolicy:
			out = append(out, fmt.Sprintf("limit %s is never applied: via = [\"milter\"], but no milter is configured "+
				"([milter] listen is empty); add the milter or via = [\"policy\"]", l.Name))
		case l.Action == "freeze" && !milter:
			out = append(out, fmt.Sprintf("limit %s never freezes: only the milter can keep a message, and no milter "+
				"is configured ([milter] listen is empty); through policy delegation it holds instead", l.Name))
		case l.Action == "freeze" && !viaMilter:
			out = append(out, fmt.Sprintf("limit %s never freezes: via = [\"policy\"], and only the milter can keep "+
				"a message; through policy delegation it holds instead", l.Name))
		}
	}
	if n := f.Server.MaxKeys; n > 0 {
		if eff := ratestore.EffectiveMaxKeys(n); eff != n {
			out = append(out, fmt.Sprintf("server.max_keys = %d is used as %d: the key table has 64 shards of equal size", n, eff))
		}
	}
	return out
}

// The accepted ranges of a limit's parameters in the configuration file
// (docs/configuration.md): beyond them a value is a typing error, not a
// policy (a period of 1ns forgets everything at once, a limit of 1e300
// never refuses). The engine itself takes any finite positive value (the
// replays of `suggest` measure with an unreachable limit).
const (
	// MinPeriod and MaxPeriod bound a limit's period, half_life and
	// learn_period.
	MinPeriod = time.Second
	MaxPeriod = 366 * 24 * time.Hour
	// MaxLimit bounds limit, cap and floor, in cost per period (messages,
	// recipients, bytes or connections).
	MaxLimit = 1e15
)

// limitRanges reports limit parameters outside the accepted ranges, and a
// limit below the cost of one message, recipient or connection, under
// which every request would be refused.
func limitRanges(limits []policy.LimitConfig) []error {
	var errs []error
	for i, l := range limits {
		at := fmt.Sprintf("limit[%d] (%s)", i, l.Name)
		bad := func(key, format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", at, key, fmt.Sprintf(format, a...)))
		}
		for key, d := range map[string]policy.Duration{"period": l.Period, "half_life": l.HalfLife, "learn_period": l.LearnPeriod} {
			if d != 0 && (time.Duration(d) < MinPeriod || time.Duration(d) > MaxPeriod) {
				bad(key, "%s is outside the accepted range %s to %s", human.Duration(time.Duration(d)), human.Duration(MinPeriod), human.Duration(MaxPeriod))
			}
		}
		for key, v := range map[string]float64{"limit": l.Limit, "cap": l.Cap, "floor": l.Floor} {
			if v > MaxLimit {
				bad(key, "%g is above the accepted maximum %g", v, MaxLimit)
			}
		}
		per := l.Per
		if per == "" {
			per = "mail"
		}
		if per != "byte" && l.Limit > 0 && l.Limit < 1 && l.Algorithm != "earrrl" {
			bad("limit", "%g is below the cost of one %s (1): every request would be refused", l.Limit, per)
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}
