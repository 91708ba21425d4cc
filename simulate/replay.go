// Package simulate replays a trace of policy requests through a
// policy.Engine on a simulated clock (`ratelimitd simulate`), and proposes
// limits from a site's own traffic (Suggest, `ratelimitd suggest`).
//
// A trace is JSON Lines, a JSON array or CSV; each line is a request (the
// attributes of SMTPD_POLICY_README plus time, size and via) or, with
// count, every and until, a stream of them (`ratelimitd simulate --help`).
// Requests are replayed in time order, at one instant in file order,
// against an empty store; a deferred message is not retried.
package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Evaluator decides one request at the trace's time; *policy.Engine is one.
type Evaluator interface {
	Evaluate(ctx context.Context, now time.Time, req *policy.Request) policy.Decision
}

// OutcomeRecorder counts outcomes and recipients; *policy.Engine is one.
type OutcomeRecorder interface {
	RecordOutcome(ctx context.Context, now time.Time, req *policy.Request, kind policy.OutcomeKind) (int, error)
	RecordRecipients(ctx context.Context, now time.Time, req *policy.Request, n int) (int, error)
}

// Result is one replayed request and the decision on it, or an outcome
// replayed (Event.Outcome set; Decision zero but for a Fault).
type Result struct {
	Event
	Decision policy.Decision
}

// Keys returns the distinct rate keys that measured the request, in limit order.
func (r *Result) Keys() []string {
	var keys []string
	for _, m := range r.Decision.Measures {
		if !slices.Contains(keys, m.Key) {
			keys = append(keys, m.Key)
		}
	}
	return keys
}

// Refused reports a defer, reject, hold or freeze.
func (r *Result) Refused() bool { return !r.Decision.Action.Admits() }

// Replay evaluates every event with ev at its time and calls fn with each
// result (reused); it returns fn's first error or ctx's. As the daemon,
// an OutcomeRecorder ev counts outcomes of messages not refused, and an
// admitted END-OF-MESSAGE request's recipients once per instance.
func Replay(ctx context.Context, ev Evaluator, events iter.Seq[Event], fn func(*Result) error) error {
	var r Result
	rec, _ := ev.(OutcomeRecorder)
	refused := map[string]bool{} // instances refused
	counted := map[string]bool{} // instances whose recipients were counted
	for e := range events {
		if e.Seq%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		r = Result{Event: e}
		inst := e.Request.Instance
		switch {
		case e.Outcome == 0:
			r.Decision = ev.Evaluate(ctx, e.Time, e.Request)
			if inst != "" && r.Refused() {
				refused[inst] = true
			}
			req := e.Request
			if rec != nil && req.ProtocolState == policy.StateEndOfMessage && !r.Refused() && !refused[inst] && !counted[inst] {
				if inst != "" {
					counted[inst] = true
				}
				if _, err := rec.RecordRecipients(ctx, e.Time, req, req.RecipientCount); err != nil && r.Decision.Fault == nil {
					r.Decision.Fault = err
				}
			}
		case rec == nil || inst != "" && refused[inst]:
			continue
		default:
			_, r.Decision.Fault = rec.RecordOutcome(ctx, e.Time, e.Request, e.Outcome)
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Filter selects results: measured under one of Keys (case-insensitive;
// empty: any), refused if RefusedOnly. The zero Filter selects everything.
type Filter struct {
	Keys        []string
	RefusedOnly bool
}

// Match reports whether f selects r.
func (f Filter) Match(r *Result) bool {
	if f.RefusedOnly && !r.Refused() {
		return false
	}
	return len(f.Keys) == 0 || slices.ContainsFunc(r.Decision.Measures, func(m policy.Measure) bool { return f.Key(m.Key) })
}

// Key reports whether f selects the rate key k.
func (f Filter) Key(k string) bool {
	return len(f.Keys) == 0 || slices.ContainsFunc(f.Keys, func(w string) bool { return strings.EqualFold(w, k) })
}

// RunOptions are the flags of `ratelimitd simulate`: the trace's format
// ("" sniffs it), the output format, the decisions selected, a line per
// key instead (Summary), and the .svg or .png file to plot into.
type RunOptions struct {
	InputFormat string
	Format      string
	Filter      Filter
	Summary     bool
	Plot        string
	PlotOptions PlotOptions
}

// Check reports a bad --format, --input-format or --plot.
func (o RunOptions) Check() error {
	if !slices.Contains([]string{OutputTable, OutputCSV, OutputJSONL}, o.Format) {
		return fmt.Errorf("--format %q: want table, csv or jsonl", o.Format)
	}
	if !slices.Contains([]string{"", FormatJSONL, FormatJSON, FormatCSV}, o.InputFormat) {
		return fmt.Errorf("--input-format %q: want jsonl, json or csv", o.InputFormat)
	}
	return CheckPlotPath(o.Plot)
}

// CheckPlotPath checks a --plot file name: empty, *.svg or *.png.
func CheckPlotPath(path string) error {
	if ext := strings.ToLower(filepath.Ext(path)); path != "" && ext != ".svg" && ext != ".png" {
		return fmt.Errorf("--plot %q: the file name must end in .svg or .png", path)
	}
	return nil
}

// Run replays tr through eng, writes the decisions o.Filter selects (or
// the summary) to w, and draws the plot. It stops at the first engine
// fault or write error.
func Run(ctx context.Context, eng *policy.Engine, tr *Trace, o RunOptions, w io.Writer) error {
	limits := eng.Limits()
	start, _ := tr.Span()
	var out Writer
	var sum *Summarizer
	var rec *Recorder
	var err error
	if o.Summary {
		sum = NewSummarizer(limits, o.Filter)
	} else if out, err = NewWriter(w, o.Format, limits, start); err != nil {
		return err
	}
	if o.Plot != "" {
		rec = NewRecorder(limits, o.Filter)
	}
	err = replayChecked(ctx, eng, tr, func(r *Result) error {
		if r.Outcome != 0 {
			return nil // counted, not decided
		}
		if sum != nil {
			sum.Add(r)
		}
		if rec != nil {
			rec.Add(r)
		}
		if out != nil && o.Filter.Match(r) {
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
		if err := sum.Summary().Write(w, o.Format); err != nil {
			return err
		}
	}
	if rec != nil {
		po := o.PlotOptions
		po.Keys = o.Filter.Keys
		if err := savePlot(o.Plot, func(w io.Writer, f string) error { return rec.WriteTo(w, f, po) }); err != nil {
			return fmt.Errorf("plot: %w", err)
		}
	}
	return nil
}
