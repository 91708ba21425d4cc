package simulate

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/chart"
	"github.com/ratelimitd/ratelimitd/internal/human"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

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
		label := fmt.Sprintf("override %s = %s", legendName(ov.Key), human.Number(ov.Limit))
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
