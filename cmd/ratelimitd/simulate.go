package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

func newSimulateCmd(opts *rootOptions) *cobra.Command {
	var ro simulate.RunOptions
	cmd := &cobra.Command{
		Use:     "simulate TRACE",
		Short:   "Replay a trace of policy requests through the configured limits",
		Long:    helpText("simulate"),
		Example: helpText("simulate examples"),
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSimulate(cmd, opts, ro, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&ro.InputFormat, "input-format", "", "trace format: jsonl, json or csv (default: from the content)")
	fl.StringVarP(&ro.Format, "format", "f", simulate.OutputTable, "output format: table, csv or jsonl")
	fl.StringVar(&ro.Plot, "plot", "", "also draw the rates into `FILE` (.svg or .png)")
	fl.StringArrayVarP(&ro.Filter.Keys, "key", "k", nil, "show only this rate `KEY` (repeatable), e.g. a SASL user or client address")
	fl.BoolVarP(&ro.Summary, "summary", "s", false, "print one line per key instead of every decision")
	fl.BoolVar(&ro.Filter.RefusedOnly, "refused", false, "print only refused requests (defer, reject, hold, freeze)")
	fl.IntVar(&ro.PlotOptions.MaxKeys, "plot-keys", simulate.DefaultPlotKeys, "without --key, how many keys to plot per limit")
	return cmd
}

func runSimulate(cmd *cobra.Command, opts *rootOptions, ro simulate.RunOptions, path string) error {
	if err := ro.Check(); err != nil {
		return err
	}
	f, err := config.Load(opts.configPath)
	if err != nil {
		return reportConfigErrors(cmd.ErrOrStderr(), err)
	}
	eng, err := policy.NewEngine(f.PolicyConfig(), ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		return reportConfigErrors(cmd.ErrOrStderr(), err)
	}
	eng.UseRecipientSets(ratestore.NewRecipients(ratestore.RecipientOptions{}))
	tr, err := simulate.ReadFile(path, ro.InputFormat)
	if err != nil {
		return err
	}
	ro.PlotOptions.Title = filepath.Base(path)
	if err := simulate.Run(cmd.Context(), eng, tr, ro, cmd.OutOrStdout()); err != nil {
		return err
	}
	if ro.Plot != "" && ro.Format == simulate.OutputTable {
		fmt.Fprintf(cmd.ErrOrStderr(), "plot written to %s\n", ro.Plot)
	}
	return nil
}
