package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
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
					cliout.JSON(cmd.OutOrStdout(), cliout.ConfigReport{Source: source, Errors: errorLines(err)})
					return errors.New("configuration is not valid")
				}
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			advice := policy.ConfigAdvice(f.PolicyConfig())
			if asJSON {
				return cliout.JSON(cmd.OutOrStdout(), cliout.NewConfigReport(f.Source, eng, append(advice, f.Warnings()...)))
			}
			cliout.Limits(cmd.OutOrStdout(), f.Source, eng)
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
