package simulate

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratelimitd/ratelimitd/internal/chart"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/policy"
)

// DefaultPlotKeys is PlotOptions.MaxKeys's default.
const DefaultPlotKeys = 6

// PlotOptions tunes Recorder.WriteTo: the keys to draw (empty: per limit the
// MaxKeys with the highest peak relative to the limit) and a title for the
// first panel.
type PlotOptions struct {
	Keys    []string
	MaxKeys int
	Title   string
}

// sample is one request's effect on one key under one limit, at x hours:
// the rates before and with it, the rate stored, the limit in force.
type sample struct {
	x, before, after, post, max float64
	refused                     bool
}

type series struct {
	key     string
	samples []sample
	peak    float64 // highest after/max
	refused int
}

// Recorder keeps the rate of every selected key at every request, per
// limit, to plot it. Not safe for concurrent use.
type Recorder struct {
	cols   columns
	filter Filter
	series []map[string]*series // per limit, by key
	start  time.Time
	endX   float64
	n      int
}

// NewRecorder returns a Recorder of the keys f.Keys selects.
func NewRecorder(limits []policy.LimitInfo, f Filter) *Recorder {
	r := &Recorder{cols: newColumns(limits), filter: Filter{Keys: f.Keys}}
	r.series = make([]map[string]*series, len(limits))
	for i := range r.series {
		r.series[i] = make(map[string]*series)
	}
	return r
}

// Add records one result. Results must come in replay order.
func (rec *Recorder) Add(r *Result) {
	if rec.n == 0 {
		rec.start = r.Time
	}
	rec.n++
	x := r.Time.Sub(rec.start).Hours()
	rec.endX = x
	for i := range r.Decision.Measures {
		m := &r.Decision.Measures[i]
		j, ok := rec.cols.index[m.Limit]
		if !ok || !rec.filter.Key(m.Key) {
			continue
		}
		s := rec.series[j][m.Key]
		if s == nil {
			s = &series{key: m.Key}
			rec.series[j][m.Key] = s
		}
		post := m.Before
		if m.Stored {
			post = m.After
		}
		sm := sample{x: x, before: human.Finite(m.Before), after: human.Finite(m.After), post: human.Finite(post), max: m.Max,
			refused: r.Refused()}
		s.samples = append(s.samples, sm)
		if ratio := sm.after / m.Max; ratio > s.peak {
			s.peak = ratio
		}
		if sm.refused {
			s.refused++
		}
	}
}

// savePlot writes what write draws in path's format to path, if it succeeds.
func savePlot(path string, write func(w io.Writer, format string) error) error {
	var buf bytes.Buffer
	if err := write(&buf, strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), ".")); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// Plot image formats for WriteTo.
const (
	PlotSVG = chart.SVG
	PlotPNG = chart.PNG
)

var page = chart.Page{Width: 10 * vg.Inch, Panel: 3.6 * vg.Inch, DPI: 120}

// WriteTo draws in format PlotSVG or PlotPNG to w a panel per limit: a line
// per key (rate against hours), the limit dashed, refusals as red crosses.
func (rec *Recorder) WriteTo(w io.Writer, format string, o PlotOptions) error {
	if len(rec.cols.limits) == 0 {
		return fmt.Errorf("%w: the configuration has no limits to plot", ErrFormat)
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultPlotKeys
	}
	order := rec.order(o)
	plots := make([]*plot.Plot, len(rec.cols.limits))
	legends := make([]plot.Legend, len(rec.cols.limits))
	for i := range rec.cols.limits {
		p, lg, err := rec.panel(i, order, o)
		if err != nil {
			return err
		}
		plots[i], legends[i] = p, lg
	}
	return drawPanels(w, format, plots, legends)
}

// drawPanels draws plots one above the other in format to w, each legend
// (if any) to its right.
func drawPanels(w io.Writer, format string, plots []*plot.Plot, legends []plot.Legend) error {
	if format != PlotSVG && format != PlotPNG {
		return fmt.Errorf("%w: plot format %q (want .svg or .png)", ErrFormat, format)
	}
	return chart.Stack(context.Background(), w, format, page, plots, legends)
}

// palette avoids red (refusals) and grey (the limit line).
var palette = []color.Color{
	chart.Blue,
	color.RGBA{255, 127, 14, 255},  // orange
	color.RGBA{44, 160, 44, 255},   // green
	color.RGBA{148, 103, 189, 255}, // purple
	color.RGBA{140, 86, 75, 255},   // brown
	color.RGBA{23, 190, 207, 255},  // cyan
	color.RGBA{188, 189, 34, 255},  // olive
	color.RGBA{227, 119, 194, 255}, // pink
}

// order ranks the recorded keys: o.Keys in that order, else by the
// highest peak relative to any limit. A key keeps its rank, and so its
// colour, in every panel.
func (rec *Recorder) order(o PlotOptions) []string {
	score := map[string]float64{}
	count := map[string]int{}
	for _, m := range rec.series {
		for k, s := range m {
			score[k] = max(score[k], s.peak)
			count[k] += len(s.samples)
		}
	}
	if len(o.Keys) > 0 {
		var out []string
		for _, want := range o.Keys {
			for k := range score {
				if strings.EqualFold(k, want) && !slices.Contains(out, k) {
					out = append(out, k)
				}
			}
		}
		return out
	}
	keys := slices.Collect(maps.Keys(score))
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(cmp.Compare(score[b], score[a]), cmp.Compare(count[b], count[a]), strings.Compare(a, b))
	})
	return keys
}

// legendLen is the most runes of a key in a legend.
const legendLen = 32

func (rec *Recorder) panel(i int, order []string, o PlotOptions) (*plot.Plot, plot.Legend, error) {
	l := rec.cols.limits[i]
	p := plot.New()
	lg := plot.NewLegend()
	lg.Top, lg.Left = true, true
	lg.ThumbnailWidth = vg.Points(22)
	lg.Padding = vg.Points(3)
	lg.TextStyle.Font.Size = vg.Points(10)

	var shown []*series
	var colors []color.Color
	for j, k := range order {
		if s := rec.series[i][k]; s != nil && (len(o.Keys) > 0 || len(shown) < o.MaxKeys) {
			shown = append(shown, s)
			colors = append(colors, palette[j%len(palette)])
		}
	}
	total := len(rec.series[i])
	period := human.Duration(l.Period)
	title := fmt.Sprintf("limit %q: %g %s per %s per %s (%s, %s)", l.Name, l.Limit, l.Per, period,
		strings.Join(l.Key, "+"), l.Mode, l.Action)
	if i == 0 && o.Title != "" {
		title = o.Title + " — " + title
	}
	switch {
	case total == 0:
		title += " — no requests measured"
	case len(shown) < total:
		title += fmt.Sprintf(" — %d of %d keys shown", len(shown), total)
	}
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.Title.Padding = vg.Points(6)
	endX := rec.xEnd()
	p.X.Label.Text = "hours since " + rec.start.UTC().Format("Mon 2006-01-02 15:04:05 MST")
	if (hourTicks{}).step(endX) < 1 {
		p.X.Label.Text = "time since " + rec.start.UTC().Format("Mon 2006-01-02 15:04:05 MST") + " (h:mm)"
	}
	p.Y.Label.Text = fmt.Sprintf("rate (%s per %s)", l.Per, period)
	p.X.Min, p.X.Max, p.Y.Min = 0, endX, 0
	p.X.Tick.Marker = hourTicks{}
	p.Y.Tick.Marker = rateTicks{}
	p.Add(plotter.NewGrid())

	ymax := l.Limit
	decays := l.Algorithm == "exponential"
	var refusedXY plotter.XYs
	var overrides []float64
	for j, s := range shown {
		xys := decimate(s.line(endX, l.Period.Hours(), decays), 3000)
		for _, pt := range xys {
			ymax = max(ymax, pt.Y)
		}
		label := human.Cut(s.key, legendLen, "…")
		if s.refused > 0 {
			label += fmt.Sprintf(" (%d refused)", s.refused)
		}
		if err := chart.Line(p, &lg, label, xys, colors[j], 1.5); err != nil {
			return nil, lg, fmt.Errorf("simulate: plot %s/%s: %w", l.Name, s.key, err)
		}
		refusedXY = append(refusedXY, s.refusals(endX)...)
		if m := s.samples[len(s.samples)-1].max; m != l.Limit && !slices.Contains(overrides, m) {
			overrides = append(overrides, m)
			ymax = max(ymax, m)
		}
	}
	for _, pt := range refusedXY {
		ymax = max(ymax, pt.Y)
	}
	p.Y.Max = ymax * 1.08
	if err := chart.Line(p, &lg, fmt.Sprintf("limit %g per %s", l.Limit, period),
		plotter.XYs{{X: 0, Y: l.Limit}, {X: endX, Y: l.Limit}}, chart.Grey, 1.2, 6, 3); err != nil {
		return nil, lg, err
	}
	for _, m := range overrides {
		if err := chart.Line(p, &lg, fmt.Sprintf("override %g per %s", m, period),
			plotter.XYs{{X: 0, Y: m}, {X: endX, Y: m}}, chart.Grey, 1, 2, 2); err != nil {
			return nil, lg, err
		}
	}
	var err error
	if len(refusedXY) > 0 {
		_, err = chart.Markers(p, &lg, "refused request", refusedXY, draw.GlyphStyle{Color: chart.Red, Radius: vg.Points(2.2), Shape: draw.CrossGlyph{}})
	}
	return p, lg, err
}

// xEnd is the right end of the time axis in hours: the last request, or
// for a burst at one instant the shortest period.
func (rec *Recorder) xEnd() float64 {
	if rec.endX > 0 {
		return rec.endX
	}
	end := math.Inf(1)
	for _, l := range rec.cols.limits {
		end = min(end, l.Period.Hours())
	}
	if !(end > 0) || math.IsInf(end, 1) {
		end = 1
	}
	return end
}

// line returns the key's rate curve: a step at each request, the decay
// interpolated geometrically between (exact for exponential), and after
// the last request the decay to the end when decays.
func (s *series) line(endX, periodH float64, decays bool) plotter.XYs {
	const minGapSteps = 1.0 / 300 // of the x range
	xys := make(plotter.XYs, 0, 2*len(s.samples)+32)
	gap := endX * minGapSteps
	for i, sm := range s.samples {
		if i > 0 && sm.x-s.samples[i-1].x > gap {
			prev := s.samples[i-1]
			xys = chart.Decay(xys, prev.x, prev.post, sm.x, sm.before, min(int((sm.x-prev.x)/gap), 40))
		} else {
			xys = append(xys, plotter.XY{X: sm.x, Y: sm.before})
		}
		xys = append(xys, plotter.XY{X: sm.x, Y: sm.post})
	}
	if last := s.samples[len(s.samples)-1]; decays && endX > last.x && periodH > 0 {
		xys = chart.Decay(xys, last.x, last.post, endX, last.post*math.Exp(-(endX-last.x)/periodH), 40)
	}
	return xys
}

// refusals returns a marker per refused request, at most one per 1/150 of
// the x range.
func (s *series) refusals(endX float64) plotter.XYs {
	var out plotter.XYs
	bucket := endX / 150
	lastB := math.Inf(-1)
	for _, sm := range s.samples {
		if !sm.refused {
			continue
		}
		b := math.Floor(sm.x / bucket)
		if bucket > 0 && b == lastB {
			continue
		}
		lastB = b
		out = append(out, plotter.XY{X: sm.x, Y: sm.after})
	}
	return out
}

// decimate bounds a line to about 4*buckets points, keeping per bucket of
// x the first, lowest, highest and last (the envelope of a sawtooth).
func decimate(xys plotter.XYs, buckets int) plotter.XYs {
	if len(xys) <= 4*buckets {
		return xys
	}
	x0, x1 := xys[0].X, xys[len(xys)-1].X
	width := (x1 - x0) / float64(buckets)
	if width <= 0 {
		return xys
	}
	out := make(plotter.XYs, 0, 4*buckets+4)
	for i := 0; i < len(xys); {
		b := math.Floor((xys[i].X - x0) / width)
		j := i
		lo, hi := i, i
		for j < len(xys) && math.Floor((xys[j].X-x0)/width) == b {
			if xys[j].Y < xys[lo].Y {
				lo = j
			}
			if xys[j].Y > xys[hi].Y {
				hi = j
			}
			j++
		}
		idx := []int{i, lo, hi, j - 1}
		slices.Sort(idx)
		for _, v := range slices.Compact(idx) {
			out = append(out, xys[v])
		}
		i = j
	}
	return out
}

// hourTicks marks the x axis in hours (h:mm for short traces), 6 to 14 labels.
type hourTicks struct{}

// step returns the labelled tick spacing in hours for a span of hours.
func (hourTicks) step(span float64) float64 {
	steps := []float64{1.0 / 60, 2.0 / 60, 5.0 / 60, 10.0 / 60, 15.0 / 60, 0.5, 1, 2, 3, 4, 6, 12, 24, 48, 168}
	for _, s := range steps {
		if span/s <= 14 {
			return s
		}
	}
	return steps[len(steps)-1] * math.Ceil(span/168/14)
}

// Ticks implements plot.Ticker.
func (h hourTicks) Ticks(lo, hi float64) []plot.Tick {
	step := h.step(hi - lo)
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: hourLabel(v, step)})
		if minor := step / 2; minor >= 1.0/60 {
			if mv := v + minor; mv <= hi {
				ticks = append(ticks, plot.Tick{Value: mv})
			}
		}
	}
	return ticks
}

func hourLabel(v, step float64) string {
	if step < 1 {
		m := int(math.Round(v * 60))
		return fmt.Sprintf("%d:%02d", m/60, m%60)
	}
	return fmt.Sprintf("%g", math.Round(v))
}

// rateTicks labels the rate axis at 1, 2, 2.5 or 5 times a power of ten,
// with k and M for thousands and millions.
type rateTicks struct{}

// Ticks implements plot.Ticker.
func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if !(span > 0) {
		span = 1
	}
	raw := span / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		v = math.Round(v/step*1e6) / 1e6 * step
		ticks = append(ticks, plot.Tick{Value: v, Label: rateLabel(v)})
		if mv := v + step/2; mv <= hi {
			ticks = append(ticks, plot.Tick{Value: mv})
		}
	}
	return ticks
}

func rateLabel(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}

// binsPerDecade is the resolution of the peak histogram (log scale).
const binsPerDecade = 8

// SavePlot draws into path (.svg or .png) a panel per limit: a log-scale
// histogram of the keys' peaks, the proposal red, overrides green.
func (s *Suggestion) SavePlot(path string) error { return savePlot(path, s.WritePlot) }

// WritePlot draws the plot of SavePlot in format PlotSVG or PlotPNG to w.
func (s *Suggestion) WritePlot(w io.Writer, format string) error {
	plots := make([]*plot.Plot, len(s.Limits))
	for i := range s.Limits {
		p, err := s.peakPanel(&s.Limits[i])
		if err != nil {
			return err
		}
		plots[i] = p
	}
	return drawPanels(w, format, plots, nil)
}

func (s *Suggestion) peakPanel(lp *LimitProposal) (*plot.Plot, error) {
	lc := lp.Config
	period := human.Duration(time.Duration(lc.Period))
	p := plot.New()
	proposed := "proposed " + human.Number(lp.Proposed)
	if lc.Ratio != 0 {
		proposed = "ratio form kept"
	}
	p.Title.Text = fmt.Sprintf("limit %q: peak %s per %s of %d keys (%s) — %s", lc.Name, unit(lc), period,
		len(lp.Peaks), strings.Join(lc.Key, "+"), proposed)
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text = fmt.Sprintf("peak rate (%s per %s, log scale)", unit(lc), period)
	p.Y.Label.Text = "keys"
	p.X.Tick.Marker = logTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	if len(lp.Peaks) == 0 {
		p.Title.Text += " — no keys measured"
		return p, nil
	}
	lo, hi := math.Inf(1), math.Log10(lp.Proposed)
	for _, k := range lp.Peaks {
		x := math.Log10(math.Max(k.Peak, 1e-3))
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	for _, ov := range lp.Overrides {
		hi = math.Max(hi, math.Log10(ov.Limit))
	}
	const width = 1.0 / binsPerDecade
	lo = math.Floor(lo/width) * width
	n := int(math.Floor((hi-lo)/width)) + 1
	bins := make([]plotter.HistogramBin, n)
	for i := range bins {
		bins[i].Min, bins[i].Max = lo+float64(i)*width, lo+float64(i+1)*width
	}
	ymax := 1.0
	for _, k := range lp.Peaks {
		i := min(max(int((math.Log10(math.Max(k.Peak, 1e-3))-lo)/width), 0), n-1)
		bins[i].Weight++
		ymax = math.Max(ymax, bins[i].Weight)
	}
	h := &plotter.Histogram{Bins: bins, Width: width, FillColor: color.RGBA{R: 0x4c, G: 0x72, B: 0xb0, A: 0xff},
		LineStyle: plotter.DefaultLineStyle}
	p.Add(h)
	p.Legend.Add("keys by peak", h)
	vline := func(label string, x float64, c color.Color, dashes ...float64) error {
		return chart.Line(p, &p.Legend, label, plotter.XYs{{X: x, Y: 0}, {X: x, Y: ymax * 1.05}}, c, 2, dashes...)
	}
	if lp.Proposed > 0 {
		if err := vline(fmt.Sprintf("proposed limit %s", human.Number(lp.Proposed)), math.Log10(lp.Proposed), chart.Red, 6, 4); err != nil {
			return nil, err
		}
	}
	for _, ov := range lp.Overrides {
		label := fmt.Sprintf("override %s = %s", human.Cut(ov.Key, legendLen, "…"), human.Number(ov.Limit))
		if err := vline(label, math.Log10(ov.Limit), palette[2], 2, 3); err != nil {
			return nil, err
		}
	}
	p.X.Min, p.X.Max = lo, math.Ceil(hi/width)*width+width
	p.Y.Min, p.Y.Max = 0, ymax*1.1
	return p, nil
}

// logTicks labels an axis of log10 values with the values themselves.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Floor(lo); d <= math.Ceil(hi); d++ {
		for _, m := range []float64{1, 2, 5} {
			x := d + math.Log10(m)
			if x < lo || x > hi {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: x, Label: rateLabel(math.Pow(10, x))})
		}
	}
	return ticks
}
