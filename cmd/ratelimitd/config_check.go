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
		Long:  helpText("config check"),
		Args:  cobra.MaximumNArgs(1),
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
					cliout.JSON(cmd.OutOrStdout(), cliout.ConfigErrorReport(path, err))
					return errors.New("configuration is not valid")
				}
				return reportConfigErrors(cmd.ErrOrStderr(), err)
			}
			advice := policy.ConfigAdvice(f.PolicyConfig())
			warnings := append(policy.LadderWarnings(f.PolicyConfig()), f.Warnings()...)
			if asJSON {
				return cliout.JSON(cmd.OutOrStdout(), cliout.NewConfigReport(f.Source, eng, append(advice, warnings...)))
			}
			cliout.Limits(cmd.OutOrStdout(), f.Source, eng)
			printLadders(cmd.OutOrStdout(), eng.Ladders())
			for _, a := range advice {
				fmt.Fprintf(cmd.OutOrStdout(), "note: %s\n", a)
			}
			for _, w := range warnings {
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

// reportConfigErrors prints one line per joined error and returns an error
// that makes the command exit 1.
func reportConfigErrors(w io.Writer, err error) error {
	lines := config.ErrorLines(err)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	return fmt.Errorf("configuration is not valid (%d problems)", len(lines))
}

// printLadders prints each ladder of the stack: its key and cost unit, then
// its limits in stack order, the first of which over a request answers.
func printLadders(w io.Writer, lds []policy.Ladder) {
	for _, ld := range lds {
		fmt.Fprintf(w, "\nladder %s, per %s (the first limit over a request that answers decides):\n", strings.Join(ld.Key, "+"), ld.Per)
		for i, s := range ld.Steps {
			tail := []string{s.Mode}
			if len(s.Via) > 0 {
				tail = append(tail, "via "+strings.Join(s.Via, ", "))
			}
			if !s.Action.Answers() {
				tail = append(tail, "dry run: the ladder goes on")
			}
			if s.Shadowed != "" {
				tail = append(tail, "never answers: "+s.Shadowed+" refuses first")
			}
			fmt.Fprintf(w, "  %d. %s (%s)\n", i+1, s, strings.Join(tail, "; "))
		}
	}
}

// newConfigReferenceCmd is `ratelimitd config reference`: the Markdown
// reference of every configuration key, committed as docs/configuration.md.
func newConfigReferenceCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reference",
		Short: "Print every configuration key (Markdown: docs/configuration.md)",
		Long:  helpText("config reference"),
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return config.WriteReference(cmd.OutOrStdout())
		},
	}
}
