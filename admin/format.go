package admin

import (
	"cmp"
	"fmt"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/policy"
)

// readableRates is how many times its limit a rate is printed as a number.
const readableRates = 1000

// FormatKeyRate prints k's rate as human.Number does, or ">N" above N =
// readableRates*k.Max (at least 1).
func FormatKeyRate(k policy.KeyRate) string {
	if bound := readableRates * max(k.Max, 1); k.Rate > bound {
		return ">" + human.Number(bound)
	}
	return human.Number(k.Rate)
}

// ConversionNote says k's state was converted at reload: "converted at
// reload 2026-11-28 01:02:03 from 5/1h (rate 7.2/1h by it)", or "".
func ConversionNote(k policy.KeyRate) string {
	c := k.Converted
	if c == nil {
		return ""
	}
	note := fmt.Sprintf("converted at %s %s from %s", c.Cause, c.At.Local().Format(time.DateTime), c.From)
	if c.Rate > 0 {
		note += fmt.Sprintf(" (rate %s/%s by it)", human.Number(c.Rate), human.Duration(c.Period))
	}
	return note
}

// answered is what an answering limit did to a message, by action name.
var answered = map[string]string{"hold": "held", "freeze": "frozen", "defer": "deferred", "reject": "rejected"}

// AnswerLine says which limit of kr (Engine.Lookup's, one key) answers the
// key's next request and its ladder's next step: "deferred by hourly;
// daily freezes above 1,000/24h"; "" when no limit refuses it.
func AnswerLine(kr []policy.KeyRate) string {
	for _, k := range kr {
		if !k.Answers {
			continue
		}
		line := cmp.Or(answered[k.Action], k.Action) + " by " + k.Limit
		if k.NextStep != "" {
			line += "; " + k.NextStep
		}
		return line
	}
	return ""
}
