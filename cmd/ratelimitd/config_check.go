package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit/store"
)

func newConfigCmd(opts *rootOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Inspect the configuration",
	}
	check := &cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a configuration file and print the effective limits",
		Long: `Validate a configuration file (or the --config file, or the embedded
default) and print the effective limit stack: key, limit per period, cost
unit, mode, action and the protocol state where each limit charges its
cost. On error, print every problem found with its TOML key and exit 1.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := opts.configPath
			if len(args) == 1 {
				path = args[0]
			}
			f, err := config.Load(path)
			if err != nil {
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			eng, err := policy.NewEngine(f.PolicyConfig(), store.NewMemory(store.MemoryOptions{MaxKeys: 64}))
			if err != nil {
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			printLimits(cmd.OutOrStdout(), f.Source, eng)
			for _, a := range policy.ConfigAdvice(f.PolicyConfig()) {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s\n", a)
			}
			if f.NoLimits {
				fmt.Fprintln(cmd.OutOrStdout(), `no limits ([policy] limits = "none"): every sender is unlimited`)
			}
			return nil
		},
	}
	cmd.AddCommand(check)
	return cmd
}

// reportConfigErrors prints one line per joined error and returns an error
// that makes the command exit 1.
func reportConfigErrors(w io.Writer, err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		fmt.Fprintln(w, strings.TrimPrefix(e.Error(), "config: invalid: "))
	}
	return errors.New("configuration is not valid")
}

func printLimits(w io.Writer, source string, eng *policy.Engine) {
	fmt.Fprintf(w, "configuration %s is valid\n", source)
	fmt.Fprintf(w, "each message is counted once per limit, whichever protocol states the MTA asks at\n\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tKEY\tRATE\tPER\tMODE\tALGORITHM\tACTION\tCOUNTED AT")
	for _, l := range eng.Limits() {
		at := l.CountAt
		fmt.Fprintf(tw, "%s\t%s\t%g/%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, strings.Join(l.Key, "+"), l.Limit,
			policy.FormatDuration(l.Period), l.Per, l.Mode, l.Algorithm, l.Action, at)
		if l.Algorithm == "baseline" {
			fmt.Fprintf(tw, "  baseline\t\t%g-%g/%s\t\t\t\t\t%g x the key's peak, learned over %s\n",
				l.Floor, l.Limit, policy.FormatDuration(l.Period), l.Factor, policy.FormatDuration(l.LearnPeriod))
		}
		for k, v := range l.Overrides {
			fmt.Fprintf(tw, "  override\t%s\t%g/%s\t\t\t\t\t\n", k, v, policy.FormatDuration(l.Period))
		}
	}
	tw.Flush()
}
