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
		Long: `Replay a trace of mail policy requests through the limits of the
configuration (--config, or the embedded default: 200/hour leaky plus
1000/day strict per SASL user, deferring) on a simulated clock, and print
what ratelimitd would have decided for every request. Use it to choose
limits before deploying them: will next week's newsletter be deferred,
how long does a compromised account send spam before the daily limit
stops it, does the busy relay ever hit its limit.

The replay starts with an empty rate store and uses the trace's own
times, so a weekend of traffic is replayed in a moment. It does not model
retries: a deferred message is not sent again unless the trace says so.

TRACE FORMAT
  JSON Lines (*.jsonl, *.json: one object per line) or CSV with a header
  row (*.csv); --input-format overrides the extension. Blank lines and
  lines starting with # are ignored. Fields are the Postfix policy
  attributes: protocol_state (default END-OF-MESSAGE), sasl_username,
  sender, recipient, recipient_count (default 1 at DATA and
  END-OF-MESSAGE), size, client_address, client_name, helo_name,
  queue_id, instance, and:

    time    RFC 3339 (2026-11-20T18:00:00Z) or Unix seconds, as a number
            or a string; fractions allowed. Required.
    count   repeat the request N times (a burst at one instant, or a
            stream with every).
    every   spacing of the repeats: 24s, 1.5s, 10m, 1h, or seconds.
    until   with every, instead of count: repeat while before this time.

  So a compromised account sending 150 messages an hour for 60 hours is
  one line:

    {"time":"2026-11-20T18:00:00Z","sasl_username":"mallory","count":9000,"every":"24s"}

  Lines need not be in time order and streams may overlap: requests are
  replayed in time order, those at the same instant in file order. Other
  Postfix attributes (client_port, encryption_protocol, ...) are ignored;
  any other field is an error. Every error names the trace line.

OUTPUT
  For every request: its time, time since the start of the trace
  (hours:minutes:seconds), trace line, rate key, and for each limit the
  rate before and after the request and the limit (in cost per period;
  "a→b > max" marks a limit that is exceeded), then the action (pass,
  warn, hold, freeze, defer, reject), the limit that decided and the
  retry-after time the client is told. --format csv gives the same as CSV
  (per limit: key, before, after, max, over, stored); --format jsonl one
  JSON object per request with every measure.

  --summary prints, instead, one line per rate key: requests, admitted
  (pass or warn), deferred, rejected, held, frozen, warned, the first
  refusal (defer, reject, hold or freeze), how long after the key's first
  request it came and which limit decided it, and the highest rate each
  limit measured.

  --plot FILE.svg or FILE.png draws one panel per limit: each key's rate
  against hours since the start, the limit as a dashed line, refused
  requests as red crosses. Without --key it draws the keys that came
  closest to their limit (--plot-keys of them).

  --key KEY (repeatable) restricts the listing, the summary and the plot
  to requests measured under those rate keys; --refused restricts the
  listing to refused requests.

EXIT STATUS
  0 when the trace was replayed, whatever was refused; 1 when the
  configuration or the trace is not valid (every bad trace line is
  reported, up to 20, as FILE: line N: problem).`,
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
	fl.StringVar(&so.inputFormat, "input-format", "", "trace format: jsonl or csv (default: from the file extension)")
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
	if so.inputFormat != "" && so.inputFormat != simulate.FormatJSONL && so.inputFormat != simulate.FormatCSV {
		return fmt.Errorf("--input-format %q: want jsonl or csv", so.inputFormat)
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
