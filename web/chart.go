package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/color"
	"math"
	"net/http"
	"slices"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/policy"
)

// The key page's chart: one panel per limit with state for the key, over
// the last chartWindow, rendered as PNG by gonum.org/v1/plot. Renders are
// bounded: chartRenders at once (more are answered 503 with Retry-After at
// once), each within chartTimeout, each panel thinned to chartPoints
// samples (the highest rate of each slot of the window kept).
const (
	chartWindow  = 24 * time.Hour
	chartWidth   = 9 * vg.Inch
	chartPanel   = 2.4 * vg.Inch
	chartDPI     = 96
	maxChartEvts = 20000
	chartRenders = 1
	chartTimeout = 10 * time.Second
	chartPoints  = 1000
	chartRetry   = "2" // seconds, the Retry-After of a 503
)

var (
	rateColor  = color.RGBA{31, 119, 180, 255}
	limitColor = color.RGBA{214, 39, 40, 255}
)

// chart answers GET /chart.png?key=K: 503 with Retry-After while
// chartRenders others are drawn or when the render passes chartTimeout.
func (s *Server) chart(w http.ResponseWriter, r *http.Request) {
	select {
	case s.charts <- struct{}{}:
		defer func() { <-s.charts }()
	default:
		chartBusy(w, "another chart is being drawn")
		return
	}
	key := r.URL.Query().Get("key")
	if s.keyHidden(w, r, key) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), chartTimeout)
	defer cancel()
	now, r := s.opts.Now(), r.WithContext(ctx)
	rates, err := s.lookup(r, key)
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	evs, err := s.queryEvents(r, events.Query{Key: key, Since: now.Add(-chartWindow), Max: maxChartEvts})
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	png, err := renderChart(ctx, key, rates, evs, now)
	if errors.Is(err, context.DeadlineExceeded) {
		s.log.Warn("chart not drawn within its deadline", "key", key, "timeout", chartTimeout)
		chartBusy(w, "the chart took too long to draw")
		return
	}
	if err != nil {
		s.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Write(png)
}

// chartBusy answers 503 with Retry-After, saying why.
func chartBusy(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", chartRetry)
	http.Error(w, "chart: "+why+"; try again in "+chartRetry+" s", http.StatusServiceUnavailable)
}

// sample is the key's rate under one limit, from an event or the state.
type sample struct {
	t       time.Time
	rate    float64
	refused bool
}

// rateSeries is one limit's line: between samples the rate decays as
// r·e^(−Δt/period), as the average does with no traffic.
func rateSeries(samples []sample, period time.Duration, now time.Time) plotter.XYs {
	var xys plotter.XYs
	x := func(t time.Time) float64 { return float64(t.Unix()) }
	steps := min(24, max(1, chartPoints/max(len(samples), 1)))
	for i, sm := range samples {
		if i > 0 {
			prev := samples[i-1]
			for k := 1; k < steps; k++ {
				t := prev.t.Add(time.Duration(k) * sm.t.Sub(prev.t) / time.Duration(steps))
				xys = append(xys, plotter.XY{X: x(t), Y: decay(prev.rate, t.Sub(prev.t), period)})
			}
			xys = append(xys, plotter.XY{X: x(sm.t), Y: decay(prev.rate, sm.t.Sub(prev.t), period)})
		}
		xys = append(xys, plotter.XY{X: x(sm.t), Y: sm.rate})
	}
	return xys
}

func decay(rate float64, d time.Duration, period time.Duration) float64 {
	if period <= 0 {
		return rate
	}
	return rate * math.Exp(-d.Seconds()/period.Seconds())
}

// thin keeps at most n of samples (sorted by time) between from and to:
// of each of n equal slots, the sample of the highest rate, refused if any
// in the slot was.
func thin(samples []sample, from, to time.Time, n int) []sample {
	if len(samples) <= n || !to.After(from) {
		return samples
	}
	out := samples[:0:0]
	slot := func(t time.Time) int { return int(float64(n) * float64(t.Sub(from)) / float64(to.Sub(from))) }
	for _, sm := range samples {
		if k := len(out) - 1; k >= 0 && slot(out[k].t) == slot(sm.t) {
			refused := out[k].refused || sm.refused
			if sm.rate > out[k].rate {
				out[k] = sm
			}
			out[k].refused = refused
			continue
		}
		out = append(out, sm)
	}
	return out
}

// renderChart draws one panel per limit: the rate line, the limit
// (dashed) and the refusals (crosses); ctx's error once it ends.
func renderChart(ctx context.Context, key string, rates []policy.KeyRate, evs []events.Event, now time.Time) ([]byte, error) {
	type limitSeries struct {
		name    string
		max     float64
		period  time.Duration
		samples []sample
	}
	byLimit := map[string]*limitSeries{}
	var order []string
	for _, kr := range rates {
		byLimit[kr.Limit] = &limitSeries{name: kr.Limit, max: kr.Max, period: kr.Period, samples: []sample{{t: now, rate: kr.Rate}}}
		order = append(order, kr.Limit)
	}
	for _, e := range evs {
		ls := byLimit[e.Limit]
		if e.Limit == "" || e.Rate <= 0 {
			continue
		}
		if ls == nil {
			ls = &limitSeries{name: e.Limit, max: e.Max}
			byLimit[e.Limit] = ls
			order = append(order, e.Limit)
		}
		ls.samples = append(ls.samples, sample{t: e.Time, rate: e.Rate, refused: slices.Contains(events.Refusals, e.Action)})
	}
	var plots [][]*plot.Plot
	for _, name := range order {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ls := byLimit[name]
		sort.SliceStable(ls.samples, func(i, j int) bool { return ls.samples[i].t.Before(ls.samples[j].t) })
		ls.samples = thin(ls.samples, now.Add(-chartWindow), now, chartPoints)
		p, err := chartPanelPlot(key, ls.name, ls.max, ls.period, ls.samples, now)
		if err != nil {
			return nil, err
		}
		plots = append(plots, []*plot.Plot{p})
	}
	if len(plots) == 0 {
		p := plot.New()
		p.Title.Text = key + ": no rate state and no events in the last 24 h"
		p.HideAxes()
		plots = append(plots, []*plot.Plot{p})
	}
	height := chartPanel * vg.Length(len(plots))
	c := vgimg.NewWith(vgimg.UseWH(chartWidth, height), vgimg.UseDPI(chartDPI), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: 0.2 * vg.Inch, PadTop: 0.1 * vg.Inch,
		PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.2 * vg.Inch}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		plots[i][0].Draw(canvases[i][0])
	}
	var b bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&b); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	return b.Bytes(), nil
}

func chartPanelPlot(key, limit string, max float64, period time.Duration, samples []sample, now time.Time) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s under %s (limit %s per %s)", key, limit, human.Number(max), dur(period))
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Min, p.X.Max = float64(now.Add(-chartWindow).Unix()), float64(now.Unix())
	p.X.Tick.Marker = plot.TimeTicks{Format: "15:04", Time: func(t float64) time.Time { return time.Unix(int64(t), 0).UTC() }}
	p.X.Label.Text = "time (UTC)"
	p.Y.Label.Text = "rate per period"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	top := max
	for _, sm := range samples {
		top = math.Max(top, sm.rate)
	}
	p.Y.Max = top * 1.15
	if p.Y.Max == 0 {
		p.Y.Max = 1
	}
	lim, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: max}, {X: p.X.Max, Y: max}})
	if err != nil {
		return nil, err
	}
	lim.Color, lim.Width, lim.Dashes = limitColor, vg.Points(1.2), []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(lim)
	p.Legend.Add("limit", lim)
	if xys := rateSeries(samples, period, now); len(xys) > 0 {
		ln, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		ln.Color, ln.Width = rateColor, vg.Points(1.5)
		p.Add(ln)
		p.Legend.Add("rate", ln)
		if len(xys) == 1 {
			if _, err := addScatter(p, xys, draw.GlyphStyle{Color: rateColor, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}); err != nil {
				return nil, err
			}
		}
	}
	var refused plotter.XYs
	for _, sm := range samples {
		if sm.refused {
			refused = append(refused, plotter.XY{X: float64(sm.t.Unix()), Y: sm.rate})
		}
	}
	if len(refused) > 0 {
		sc, err := addScatter(p, refused, draw.GlyphStyle{Color: limitColor, Radius: vg.Points(2.5), Shape: draw.CrossGlyph{}})
		if err != nil {
			return nil, err
		}
		p.Legend.Add("refused", sc)
	}
	p.Legend.Top, p.Legend.Left = false, true // bottom left: the limit line runs along the top
	return p, nil
}

// addScatter adds the points xys, drawn with g, to p.
func addScatter(p *plot.Plot, xys plotter.XYs, g draw.GlyphStyle) (*plotter.Scatter, error) {
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle = g
	p.Add(sc)
	return sc, nil
}
