package cliout

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Rates prints a row per key and limit, with how long it is refused.
func Rates(w io.Writer, kr []policy.KeyRate) {
	t := termsafe.NewTable(w, "KEY", "LIMIT", "RATE", "MAX", "PERIOD", "STATUS")
	for _, k := range kr {
		status := "ok"
		switch {
		case k.Over:
			status = "over: allowed again in " + human.Duration(k.RetryAfter.Round(time.Second))
		case k.Refusing:
			status = "at limit: allowed again in " + human.Duration(k.RetryAfter.Round(time.Second))
		}
		maxText := human.Number(k.Max)
		if k.Baseline {
			maxText = strconv.FormatFloat(k.Max, 'f', 1, 64)
			status += fmt.Sprintf(" (baseline: learned peak %.1f, max is the allowance, cap %s)", k.Peak, human.Number(k.Cap))
		}
		rate := admin.FormatKeyRate(k)
		if noun := outcomeNouns[k.Per]; noun != "" {
			status += "; counts " + noun + " (" + k.Per + ")"
		}
		if k.Ratio > 0 {
			rate = fmt.Sprintf("%s of %s", human.Number(math.Round(k.Rate)), human.Number(math.Round(k.Recipients)))
			maxText = strconv.FormatFloat(100*k.Ratio, 'g', -1, 64) + "%"
			status += " of at least " + human.Number(k.MinCount) + " recipients"
		}
		if note := admin.ConversionNote(k); note != "" {
			status += "; " + note
		}
		t.Row(k.Key, k.Limit, rate, maxText, human.Duration(k.Period), status)
	}
	t.Flush()
}

// outcomeNouns name what an outcome limit counts, by its per.
var outcomeNouns = map[string]string{"bounce": "bounced recipients", "unknown_rcpt": "unknown recipients",
	"deferral": "deferred recipients"}

// RateRow is one element of `rate show/list --json`: the rate to two
// decimals, the wait in whole seconds rounded up.
type RateRow struct {
	Key               string  `json:"key"`
	Limit             string  `json:"limit"`
	Rate              float64 `json:"rate"`
	Max               float64 `json:"max"`
	Period            string  `json:"period"`
	PeriodSeconds     float64 `json:"period_seconds"`
	Per               string  `json:"per"` // what the limit counts: mail, rcpt, ..., unknown_rcpt
	Over              bool    `json:"over"`
	Refusing          bool    `json:"refusing"`
	RetryAfterSeconds float64 `json:"retry_after_seconds"`
	// Ratio, MinCount, Recipients: a limit of the ratio form, Rate its
	// failures and Max those it permits of Recipients (the recipients'
	// rate to two decimals).
	Ratio      float64 `json:"ratio,omitempty"`
	MinCount   float64 `json:"min_count,omitempty"`
	Recipients float64 `json:"recipients,omitempty"`
	// Converted: the state was converted from the limit's earlier
	// parameters (policy.ConvertedView).
	Converted *ConvertedRow `json:"converted,omitempty"`
}

// ConvertedRow is RateRow's account of a converted state.
type ConvertedRow struct {
	From          string    `json:"from"`
	PeriodSeconds float64   `json:"from_period_seconds"`
	Algorithm     string    `json:"from_algorithm"`
	At            time.Time `json:"at"`
	Cause         string    `json:"cause"`
	// Rate is the key's rate now by the old parameters (rate show only).
	Rate float64 `json:"from_rate,omitempty"`
}

// RateRows converts kr to the rows of `rate show/list --json`.
func RateRows(kr []policy.KeyRate) []RateRow {
	out := make([]RateRow, len(kr))
	for i, k := range kr {
		out[i] = RateRow{Key: k.Key, Limit: k.Limit, Rate: round2(k.Rate), Max: k.Max, Per: k.Per,
			Period: human.Duration(k.Period), PeriodSeconds: k.Period.Seconds(), Over: k.Over, Refusing: k.Refusing,
			RetryAfterSeconds: math.Ceil(k.RetryAfter.Seconds()), Ratio: k.Ratio, MinCount: k.MinCount, Recipients: round2(k.Recipients)}
		if c := k.Converted; c != nil {
			out[i].Converted = &ConvertedRow{From: c.From, PeriodSeconds: c.Period.Seconds(), Algorithm: c.Algorithm,
				At: c.At, Cause: c.Cause, Rate: round2(c.Rate)}
		}
	}
	return out
}

// round2 rounds x to two decimals below 2^52 (x*100 could overflow).
func round2(x float64) float64 {
	if math.Abs(x) >= 1<<52 {
		return x
	}
	return math.Round(x*100) / 100
}

// Events prints one line per event, every field through termsafe; a
// coalesced event shows its count and last time.
func Events(w io.Writer, es []events.Event) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t := termsafe.NewTable(w, "TIME", "ACTION", "KEY", "LIMIT", "RATE/MAX", "DETAILS")
	for _, e := range es {
		rate := ""
		if e.Max != 0 {
			rate = human.Number(e.Rate) + "/" + human.Number(e.Max)
		}
		var details []string
		if e.Count > 1 {
			details = append(details, fmt.Sprintf("count=%d last=%s", e.Count, e.Last.Local().Format(time.DateTime)))
		}
		for _, f := range [][2]string{{"sender", e.Sender}, {"client", e.Client}, {"queue_id", e.QueueID}, {"by", e.By}, {"detail", e.Detail}} {
			if f[1] != "" {
				details = append(details, f[0]+"="+termsafe.Line(f[1]))
			}
		}
		t.Row(e.Time.Local().Format(time.DateTime), e.Action, orDash(e.Key), orDash(e.Limit), orDash(rate), strings.Join(details, " "))
	}
	t.Flush()
}

// EventSummary prints one line per key.
func EventSummary(w io.Writer, ks []events.KeySummary) {
	if len(ks) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t := termsafe.NewTable(w, "KEY", "REFUSALS", "FIRST", "LAST", "LIMITS")
	for _, k := range ks {
		t.Row(orDash(k.Key), strconv.Itoa(k.Refusals), k.First.Local().Format(time.DateTime),
			k.Last.Local().Format(time.DateTime), orDash(strings.Join(k.Limits, ",")))
	}
	t.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
