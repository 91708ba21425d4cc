package admin

import (
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
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

// CountSelected is how many messages a thaw or delete of sel would act on:
// its IDs if it names any, else the held and frozen messages of its sender
// or key quarantined longer ago than sel.OlderThan (any age if zero).
func CountSelected(b Backend, sel lifecycle.Selection) (int, error) {
	if len(sel.IDs) > 0 {
		return len(sel.IDs), nil
	}
	es, err := b.List(ListQuery{Sender: sel.Sender, Key: sel.Key})
	n := 0
	for _, e := range es {
		if sel.OlderThan <= 0 || time.Since(e.Created) > sel.OlderThan {
			n++
		}
	}
	return n, err
}
