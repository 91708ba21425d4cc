package cliout

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
)

// ConfigReport is `config check --json`: the source, whether it is valid,
// the effective limits, notes on settings without effect, or the errors.
type ConfigReport struct {
	Source string        `json:"source"`
	Valid  bool          `json:"valid"`
	Limits []LimitReport `json:"limits,omitempty"`
	Notes  []string      `json:"notes,omitempty"`
	Errors []string      `json:"errors,omitempty"`
}

// LimitReport is one limit of a ConfigReport.
type LimitReport struct {
	Name          string             `json:"name"`
	Key           []string           `json:"key"`
	Limit         float64            `json:"limit"`
	Period        string             `json:"period"`
	PeriodSeconds float64            `json:"period_seconds"`
	Per           string             `json:"per"`
	Mode          string             `json:"mode"`
	Algorithm     string             `json:"algorithm"`
	Action        string             `json:"action"`
	Via           []string           `json:"via"`
	CountedAt     string             `json:"counted_at"`
	Overrides     map[string]float64 `json:"overrides,omitempty"`
}

// ConfigErrorReport is the report of a configuration from path (""
// means the embedded default) that did not load: one error per problem.
func ConfigErrorReport(path string, err error) ConfigReport {
	if path == "" {
		path = config.EmbeddedSource
	}
	return ConfigReport{Source: path, Errors: config.ErrorLines(err)}
}

// NewConfigReport is the report of a valid configuration from source.
func NewConfigReport(source string, eng *policy.Engine, notes []string) ConfigReport {
	r := ConfigReport{Source: source, Valid: true, Notes: notes}
	for _, l := range eng.Limits() {
		r.Limits = append(r.Limits, LimitReport{Name: l.Name, Key: l.Key, Limit: l.Limit, Period: human.Duration(l.Period),
			PeriodSeconds: l.Period.Seconds(), Per: l.Per, Mode: l.Mode, Algorithm: l.Algorithm, Action: l.Action,
			Via: via(l), CountedAt: l.CountAt, Overrides: l.Overrides})
	}
	return r
}

// via is the front ends measuring l: its `via`, or both.
func via(l policy.LimitInfo) []string {
	if len(l.Via) == 0 {
		return []string{policy.ViaPolicy, policy.ViaMilter}
	}
	return l.Via
}

// Limits prints that the configuration is valid and its limit stack, with
// baseline ranges and overrides as rows of their own.
func Limits(w io.Writer, source string, eng *policy.Engine) {
	fmt.Fprintf(w, "configuration %s is valid\n", source)
	fmt.Fprintf(w, "each message is counted once per limit, whichever protocol states the MTA asks at\n\n")
	t := termsafe.NewTable(w, "LIMIT", "KEY", "RATE", "PER", "MODE", "ALGORITHM", "ACTION", "VIA", "COUNTED AT")
	for _, l := range eng.Limits() {
		period := human.Duration(l.Period)
		t.Row(l.Name, strings.Join(l.Key, "+"), human.Number(l.Limit)+"/"+period, l.Per, l.Mode, l.Algorithm, l.Action,
			strings.Join(via(l), "+"), l.CountAt)
		if l.Algorithm == "baseline" {
			t.Row("  baseline", "", human.Number(l.Floor)+"-"+human.Number(l.Limit)+"/"+period, "", "", "", "", "",
				fmt.Sprintf("%g x the key's peak, learned over %s", l.Factor, human.Duration(l.LearnPeriod)))
		}
		for _, k := range slices.Sorted(maps.Keys(l.Overrides)) {
			t.Row("  override", k, human.Number(l.Overrides[k])+"/"+period)
		}
	}
	t.Flush()
}
