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
// negative value (0 means the key's default).
func negativeDurations(f *File) []error {
	var errs []error
	walkKeys(reflect.ValueOf(f).Elem(), "", func(key string, v reflect.Value) {
		if d, ok := v.Interface().(policy.Duration); ok && d < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative, got %s (0 or leaving it out means the default)", key, time.Duration(d)))
		}
	})
	return errs
}

// Warnings returns, in plain words, the settings of f that are valid but
// do nothing as written: limits no front end can reach, outcome limits
// without a feed, and a max_keys the store rounds.
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
	for _, l := range f.Limits {
		if !f.Outcome.Feeds() && slices.Contains([]string{"bounce", "unknown_rcpt", "deferral"}, l.Per) {
			out = append(out, fmt.Sprintf("limit %s counts nothing: per = %q counts outcomes, and no outcome feed is configured "+
				"([outcome] maillog, notices_listen and exim_listen are empty)", l.Name, l.Per))
		}
	}
	if n := f.Server.MaxKeys; n > 0 {
		if eff := ratestore.EffectiveMaxKeys(n); eff != n {
			out = append(out, fmt.Sprintf("server.max_keys = %d is used as %d: the key table has 64 shards of equal size", n, eff))
		}
	}
	return out
}

// The ranges the file accepts for a limit's parameters (the engine takes
// any finite positive value).
const (
	MinPeriod = time.Second          // period, half_life, learn_period
	MaxPeriod = 366 * 24 * time.Hour // period, half_life, learn_period
	MaxLimit  = 1e15                 // limit, cap, floor in cost per period
)

// limitRanges reports limit parameters outside the accepted ranges, and a
// limit below the cost of one request, which would refuse every request.
func limitRanges(limits []policy.LimitConfig) []error {
	var errs []error
	for i, l := range limits {
		at := fmt.Sprintf("limit[%d] (%s)", i, l.Name)
		bad := func(key, format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s.%s: %s", at, key, fmt.Sprintf(format, a...)))
		}
		for _, c := range []struct {
			key string
			d   policy.Duration
		}{{"period", l.Period}, {"half_life", l.HalfLife}, {"learn_period", l.LearnPeriod}} {
			if d := c.d; d != 0 && (time.Duration(d) < MinPeriod || time.Duration(d) > MaxPeriod) {
				bad(c.key, "%s is outside the accepted range %s to %s", human.Duration(time.Duration(d)), human.Duration(MinPeriod), human.Duration(MaxPeriod))
			}
		}
		for _, c := range []struct {
			key string
			v   float64
		}{{"limit", l.Limit}, {"cap", l.Cap}, {"floor", l.Floor}} {
			if c.v > MaxLimit {
				bad(c.key, "%g is above the accepted maximum %g", c.v, MaxLimit)
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
