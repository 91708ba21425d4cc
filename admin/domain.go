package admin

import (
	"strings"

	"github.com/ratelimitd/ratelimitd/policy"
)

// OfDomain keeps the rates of mail domain d (with or without a leading
// "@"): the keys whose first part is an address at d, or d itself; case
// does not matter (see `rate list --help`). kr is not modified.
func OfDomain(kr []policy.KeyRate, d string) []policy.KeyRate {
	d = strings.ToLower(strings.TrimPrefix(d, "@"))
	out := kr[:0:0]
	for _, k := range kr {
		first, _, _ := strings.Cut(strings.ToLower(k.Key), "|")
		if strings.HasSuffix(first, "@"+d) || first == d {
			out = append(out, k)
		}
	}
	return out
}
