package admin

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// OfDomain returns the rates of mail domain d ("@" optional): keys whose
// first part is an address at d, or d itself, ignoring case.
func OfDomain(kr []policy.KeyRate, d string) []policy.KeyRate {
	d = strings.ToLower(strings.TrimPrefix(d, "@"))
	return slices.DeleteFunc(slices.Clone(kr), func(k policy.KeyRate) bool {
		first, _, _ := strings.Cut(strings.ToLower(k.Key), "|")
		return !strings.HasSuffix(first, "@"+d) && first != d
	})
}

// CountSelected is how many messages a thaw or delete of sel would act
// on.
func CountSelected(ctx context.Context, b Backend, sel lifecycle.Selection) (int, error) {
	if len(sel.IDs) > 0 {
		return len(sel.IDs), nil
	}
	es, err := b.List(ctx, ListQuery{Sender: sel.Sender, Key: sel.Key})
	n := 0
	for _, e := range es {
		if sel.OlderThan <= 0 || time.Since(e.Created) > sel.OlderThan {
			n++
		}
	}
	return n, err
}
