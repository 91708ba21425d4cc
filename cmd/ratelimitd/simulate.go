package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/simulate"
)

// suggestOptions are suggest's flags: so holds what simulate.Suggest takes.
type suggestOptions struct {
	maillog     []string
	inputFormat string
	so          simulate.SuggestOptions
	plot        string
	toml        string
	mo          maillogOptions
}

func newSuggestCmd(opts *rootOptions) *cobra.Command {
	so := &suggestOptions{}
	cmd := &cobra.Command{
		Use:     "suggest TRACE | --maillog FILE...",
		Short:   "Propose limits from your own mail: peak rates, outliers, bulk senders",
		Long:    helpText("suggest"),
		Example: helpText("suggest examples"),
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runSuggest(cmd, opts, so, args)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&so.maillog, "maillog", nil, "read this Postfix or Exim mail log `FILE` instead of a trace (repeatable)")
	fl.StringVar(&so.inputFormat, "input-format", "", "trace format: jsonl, json or csv (default: from the content)")
	fl.Float64Var(&so.so.Headroom, "headroom", simulate.DefaultHeadroom, "factor between the percentile peak and the proposed limit")
	fl.Float64Var(&so.so.Percentile, "percentile", simulate.DefaultPercentile, "percentile of the keys' peaks the limit is based on (100: every key fits; with fewer than 20 keys, 95 is the highest peak)")
	fl.StringArrayVar(&so.so.Allow, "allow", nil, "`KEY` is a legitimate bulk sender: give it an override (repeatable)")
	fl.StringVar(&so.plot, "plot", "", "draw the distribution of peaks into `FILE` (.svg or .png)")
	fl.StringVar(&so.toml, "toml", "", "also write the proposed [[limit]] tables to `FILE`")
	so.mo.addFlags(cmd)
	return cmd
}

func runSuggest(cmd *cobra.Command, opts *rootOptions, so *suggestOptions, args []string) error {
	if (len(args) == 1) == (len(so.maillog) > 0) {
		return errors.New("give either a TRACE or --maillog FILE")
	}
	if err := simulate.CheckPlotPath(so.plot); err != nil {
		return err
	}
	f, err := config.Load(opts.configPath)
	if err != nil {
		return reportConfigErrors(cmd.ErrOrStderr(), err)
	}
	var tr *simulate.Trace
	if len(args) == 1 {
		if tr, err = simulate.ReadFile(args[0], so.inputFormat); err != nil {
			return err
		}
	} else {
		r, err := so.mo.reader(so.maillog)
		if err != nil {
			return err
		}
		msgs := r.Messages() // fills the Stats' message counts
		if err := r.Stats().WriteSummary(cmd.ErrOrStderr()); err != nil {
			return err
		}
		tr = maillog.Trace(msgs)
	}
	if tr.Len() == 0 {
		return errors.New("the trace has no requests: nothing to base limits on")
	}
	so.so.NewStore = func() policy.Store { return ratestore.NewMemory(ratestore.MemoryOptions{}) }
	so.so.NewRecipientSets = func() policy.RecipientSets { return ratestore.NewRecipients(ratestore.RecipientOptions{}) }
	s, err := simulate.Suggest(cmd.Context(), f.PolicyConfig(), tr, so.so)
	if err != nil {
		return err
	}
	if err := s.WriteText(cmd.OutOrStdout()); err != nil {
		return err
	}
	if so.toml != "" {
		text, err := s.TOML()
		if err == nil {
			err = os.WriteFile(so.toml, []byte(text), 0o644)
		}
		if err != nil {
			return err
		}
	}
	if so.plot != "" {
		if err := s.SavePlot(so.plot); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "plot written to %s\n", so.plot)
	}
	return nil
}

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

// maillogOptions are the mail log flags of trace from-maillog and suggest.
type maillogOptions struct {
	tz     string
	logEnd string
}

func (mo *maillogOptions) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&mo.tz, "tz", "", "time `ZONE` of timestamps without an offset, e.g. Europe/Berlin (default: the local zone)")
	fl.StringVar(&mo.logEnd, "log-end", "", "date year-less syslog lines so that each file ends no later than `TIME` (RFC 3339; default: the file's modification time)")
}

// reader returns a Reader that has dated the logs at paths.
func (mo *maillogOptions) reader(paths []string) (*maillog.Reader, error) {
	opts := maillog.Options{}
	if mo.tz != "" {
		loc, err := time.LoadLocation(mo.tz)
		if err != nil {
			return nil, fmt.Errorf("--tz: %w", err)
		}
		opts.Location = loc
	}
	if mo.logEnd != "" {
		t, err := simulate.ParseTime(mo.logEnd)
		if err != nil {
			return nil, fmt.Errorf("--log-end: %w", err)
		}
		opts.End = t
	}
	r := maillog.NewReader(opts)
	for _, p := range paths {
		if err := r.ReadFile(p); err != nil {
			return nil, err
		}
	}
	return r, nil
}

func newTraceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "trace",
		Short: "Make traces for simulate and suggest",
	}
	cmd.AddCommand(newTraceFromMaillogCmd())
	return cmd
}

func newTraceFromMaillogCmd() *cobra.Command {
	mo := &maillogOptions{}
	var output string
	cmd := &cobra.Command{
		Use:     "from-maillog [FILE...]",
		Short:   "Turn Postfix or Exim mail logs into a trace for simulate and suggest",
		Long:    helpText("trace from maillog"),
		Example: helpText("trace from maillog examples"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				p, err := maillog.FindLog(cmd.Context())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "reading %s\n", p)
				args = []string{p}
			}
			r, err := mo.reader(args)
			if err != nil {
				return err
			}
			w, closeOut, err := cliout.Create(output, termsafe.Unwrap(cmd.OutOrStdout())) // a trace is data
			if err != nil {
				return err
			}
			err = r.StreamTrace(w, "ratelimitd trace from-maillog "+strings.Join(args, " "))
			if err = errors.Join(err, closeOut()); err != nil {
				return err
			}
			return r.Stats().WriteSummary(cmd.ErrOrStderr())
		},
	}
	mo.addFlags(cmd)
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the trace to `FILE` instead of standard output")
	return cmd
}
