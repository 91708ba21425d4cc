package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

func newConfigCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
	}
	var asJSON bool
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a configuration file and print the effective limits",
		Long: `Validate a configuration file (or the --config file, or the embedded
default) and print the effective limit stack: key, limit per period, cost
unit, mode, action, the front ends that measure it (via) and when each
limit charges its cost, then notes on settings that have no effect. On error, print every problem
found with its TOML key (decoding errors with FILE:LINE:COLUMN) and exit 1.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := opts.configPath
			if len(args) == 1 {
				path = args[0]
			}
			f, err := config.Load(path)
			var eng *policy.Engine
			if err == nil {
				eng, err = policy.NewEngine(f.PolicyConfig(), ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: 64}))
			}
			if err != nil {
				if asJSON {
					source := path
					if source == "" {
						source = config.EmbeddedSource
					}
					printJSON(cmd.OutOrStdout(), configReport{Source: source, Errors: errorLines(err)})
					return errors.New("configuration is not valid")
				}
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			advice := policy.ConfigAdvice(f.PolicyConfig())
			if asJSON {
				advice = append(advice, f.Warnings()...)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), newConfigReport(f.Source, eng, advice))
			}
			printLimits(cmd.OutOrStdout(), f.Source, eng)
			for _, a := range advice {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s\n", a)
			}
			for _, w := range f.Warnings() {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s\n", w)
			}
			if f.NoLimits {
				fmt.Fprintln(cmd.OutOrStdout(), `no limits ([policy] limits = "none"): every sender is unlimited`)
			}
			return nil
		},
	}
	check.Flags().BoolVar(&asJSON, "json", false, "print the result (limits, or errors) as a JSON object")
	cmd.AddCommand(check, newConfigReferenceCmd())
	return cmd
}

// errorLines splits a joined configuration error into one line per
// problem, without the package prefix.
func errorLines(err error) []string {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = strings.TrimPrefix(e.Error(), "config: invalid: ")
	}
	return out
}

// reportConfigErrors prints one line per joined error and returns an error
// that makes the command exit 1.
func reportConfigErrors(w io.Writer, err error) error {
	lines := errorLines(err)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	return fmt.Errorf("configuration is not valid (%d problems)", len(lines))
}

// configReport is `config check --json`.
type configReport struct {
	Source string        `json:"source"`
	Valid  bool          `json:"valid"`
	Limits []limitReport `json:"limits,omitempty"`
	Notes  []string      `json:"notes,omitempty"`
	Errors []string      `json:"errors,omitempty"`
}

type limitReport struct {
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

func newConfigReport(source string, eng *policy.Engine, notes []string) configReport {
	r := configReport{Source: source, Valid: true, Notes: notes}
	for _, l := range eng.Limits() {
		r.Limits = append(r.Limits, limitReport{Name: l.Name, Key: l.Key, Limit: l.Limit, Period: policy.FormatDuration(l.Period),
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

func printLimits(w io.Writer, source string, eng *policy.Engine) {
	fmt.Fprintf(w, "configuration %s is valid\n", source)
	fmt.Fprintf(w, "each message is counted once per limit, whichever protocol states the MTA asks at\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tKEY\tRATE\tPER\tMODE\tALGORITHM\tACTION\tVIA\tCOUNTED AT")
	for _, l := range eng.Limits() {
		at := l.CountAt
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, strings.Join(l.Key, "+"), admin.FormatRate(l.Limit),
			policy.FormatDuration(l.Period), l.Per, l.Mode, l.Algorithm, l.Action, strings.Join(via(l), "+"), at)
		if l.Algorithm == "baseline" {
			fmt.Fprintf(tw, "  baseline\t\t%s-%s/%s\t\t\t\t\t\t%g x the key's peak, learned over %s\n",
				admin.FormatRate(l.Floor), admin.FormatRate(l.Limit), policy.FormatDuration(l.Period), l.Factor, policy.FormatDuration(l.LearnPeriod))
		}
		keys := make([]string, 0, len(l.Overrides))
		for k := range l.Overrides {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(tw, "  override\t%s\t%s/%s\t\t\t\t\t\t\n", k, admin.FormatRate(l.Overrides[k]), policy.FormatDuration(l.Period))
		}
	}
	tw.Flush()
}
