package simulate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/ratelimitd/ratelimitd/policy"
)

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
	switch o.Format {
	case OutputTable, OutputCSV, OutputJSONL:
	default:
		return fmt.Errorf("--format %q: want table, csv or jsonl", o.Format)
	}
	switch o.InputFormat {
	case "", FormatJSONL, FormatJSON, FormatCSV:
	default:
		return fmt.Errorf("--input-format %q: want jsonl, json or csv", o.InputFormat)
	}
	return CheckPlotPath(o.Plot)
}

// CheckPlotPath checks a --plot file name: empty, *.svg or *.png.
func CheckPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
	default:
		if path != "" {
			return fmt.Errorf("--plot %q: the file name must end in .svg or .png", path)
		}
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
