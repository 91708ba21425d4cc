package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

type simulateOptions struct {
	inputFormat string
	format      string
	plot        string
	keys        []string
	summary     bool
	refused     bool
	plotKeys    int
}

func newSimulateCmd(opts *rootOptions) *cobra.Command {
	so := &simulateOptions{}
	cmd := &cobra.Command{
		Use:   "simulate TRACE",
		Short: "Replay a trace of policy requests through the configured limits",
		Long:  helpText("simulate"),
		Example: `  # What does the default configuration do to a compromised account?
  ratelimitd simulate --summary testdata/traces/compromised-weekend.jsonl

  # Every decision for the newsletter sender only, with a plot:
  ratelimitd simulate --key newsletter --plot newsletter.png testdata/traces/newsletter.jsonl

  # A relay limited by client address, as CSV for a spreadsheet:
  ratelimitd simulate -c testdata/traces/relay.toml --format csv testdata/traces/busy-relay.csv > relay.csv

  # Only the refusals, from a trace with no recognisable extension:
  ratelimitd simulate --refused --input-format jsonl /var/tmp/policy-trace.log`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSimulate(cmd, opts, so, args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&so.inputFormat, "input-format", "", "trace format: jsonl, json or csv (default: from the content)")
	fl.StringVarP(&so.format, "format", "f", simulate.OutputTable, "output format: table, csv or jsonl")
	fl.StringVar(&so.plot, "plot", "", "also draw the rates into `FILE` (.svg or .png)")
	fl.StringArrayVarP(&so.keys, "key", "k", nil, "show only this rate `KEY` (repeatable), e.g. a SASL user or client address")
	fl.BoolVarP(&so.summary, "summary", "s", false, "print one line per key instead of every decision")
	fl.BoolVar(&so.refused, "refused", false, "print only refused requests (defer, reject, hold, freeze)")
	fl.IntVar(&so.plotKeys, "plot-keys", simulate.DefaultPlotKeys, "without --key, how many keys to plot per limit")
	return cmd
}

func runSimulate(cmd *cobra.Command, opts *rootOptions, so *simulateOptions, path string) error {
	switch so.format {
	case simulate.OutputTable, simulate.OutputCSV, simulate.OutputJSONL:
	default:
		return fmt.Errorf("--format %q: want table, csv or jsonl", so.format)
	}
	switch so.inputFormat {
	case "", simulate.FormatJSONL, simulate.FormatJSON, simulate.FormatCSV:
	default:
		return fmt.Errorf("--input-format %q: want jsonl, json or csv", so.inputFormat)
	}
	if err := checkPlotPath(so.plot); err != nil {
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
	tr, err := simulate.ReadFile(path, so.inputFormat)
	if err != nil {
		return err
	}
	limits := eng.Limits()
	filter := simulate.Filter{Keys: so.keys, RefusedOnly: so.refused}
	start, _ := tr.Span()

	var out simulate.Writer
	if !so.summary {
		if out, err = simulate.NewWriter(cmd.OutOrStdout(), so.format, limits, start); err != nil {
			return err
		}
	}
	var sum *simulate.Summarizer
	if so.summary {
		sum = simulate.NewSummarizer(limits, filter)
	}
	var rec *simulate.Recorder
	if so.plot != "" {
		rec = simulate.NewRecorder(limits, filter)
	}
	err = simulate.Replay(cmd.Context(), eng, tr.Events(), func(r *simulate.Result) error {
		if r.Decision.Fault != nil {
			return fmt.Errorf("line %d: engine fault: %w", r.Line, r.Decision.Fault)
		}
		if sum != nil {
			sum.Add(r)
		}
		if rec != nil {
			rec.Add(r)
		}
		if out != nil && filter.Match(r) {
			return out.Write(r)
		}
		return nil
	})
	if out != nil {
		err = errors.Join(err, out.Close())
	}
	if err != nil {
		return err
	}
	if sum != nil {
		if err := sum.Summary().Write(cmd.OutOrStdout(), so.format); err != nil {
			return err
		}
	}
	if rec != nil {
		if err := rec.Save(so.plot, simulate.PlotOptions{Keys: so.keys, MaxKeys: so.plotKeys,
			Title: filepath.Base(path)}); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		if so.format == simulate.OutputTable {
			fmt.Fprintf(cmd.ErrOrStderr(), "plot written to %s\n", so.plot)
		}
	}
	return nil
}
