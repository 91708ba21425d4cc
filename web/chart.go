package web

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/chart"
	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/policy"
)

// The key page's chart: one panel per limit of the key over a chartWindow,
// a PNG drawn by gonum.org/v1/plot; chartRenders at once (more get 503),
// each within chartTimeout, each panel thinned to chartPoints samples.
const (
	maxChartEvts = 20000
	chartRenders = 1
	chartTimeout = 10 * time.Second
	chartPoints  = 1000
	chartRetry   = "2" // seconds, the Retry-After of a 503
)

var chartPage = chart.Page{Width: 9 * vg.Inch, Panel: 2.4 * vg.Inch, DPI: 96}

// chartWindow is a span the key page offers: the last D, labelled every
// Step in Format (UTC).
type chartWindow struct {
	Name   string
	D      time.Duration
	Step   time.Duration
	Format string
}

// chartWindows are the windows offered, shortest first.
var chartWindows = []chartWindow{
	{"1h", time.Hour, 10 * time.Minute, "15:04"},
	{"6h", 6 * time.Hour, time.Hour, "15:04"},
	{"24h", 24 * time.Hour, 3 * time.Hour, "15:04"},
	{"7d", 7 * 24 * time.Hour, 24 * time.Hour, "Mon 01-02"},
}

const defaultWindow = "24h"

// keyWindow is the chartWindow of ?window= for key; false when it has
// answered: 404 for a key out of scope, 400 for another window.
func (s *Server) keyWindow(w http.ResponseWriter, r *http.Request, key string) (chartWindow, bool) {
	if s.keyHidden(w, r, key) {
		return chartWindow{}, false
	}
	name := cmp.Or(r.URL.Query().Get("window"), defaultWindow)
	if i := slices.IndexFunc(chartWindows, func(cw chartWindow) bool { return cw.Name == name }); i >= 0 {
		return chartWindows[i], true
	}
	s.fail(w, r, http.StatusBadRequest, fmt.Errorf("window %q: want 1h, 6h, 24h or 7d", name))
	return chartWindow{}, false
}

// showing is the shortest window that shows a refusal at t.
func showing(now, t time.Time) string {
	for _, w := range chartWindows {
		if now.Sub(t) < w.D*9/10 {
			return w.Name
		}
	}
	return chartWindows[len(chartWindows)-1].Name
}

// Ticks marks every Step between min and max (Unix seconds), aligned to
// UTC: plot.Ticker.
func (cw chartWindow) Ticks(min, max float64) []plot.Tick {
	var ticks []plot.Tick
	for t := time.Unix(int64(min), 0).UTC().Truncate(cw.Step); float64(t.Unix()) <= max; t = t.Add(cw.Step) {
		if float64(t.Unix()) >= min {
			ticks = append(ticks, plot.Tick{Value: float64(t.Unix()), Label: t.Format(cw.Format)})
		}
	}
	return ticks
}

// chart answers GET /chart.png?key=K&window=W: 503 with Retry-After
// while chartRenders others are drawn or past chartTimeout.
func (s *Server) chart(w http.ResponseWriter, r *http.Request) {
	select {
	case s.charts <- struct{}{}:
		defer func() { <-s.charts }()
	default:
		chartBusy(w, "another chart is being drawn")
		return
	}
	key := r.URL.Query().Get("key")
	cw, ok := s.keyWindow(w, r, key)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), chartTimeout)
	defer cancel()
	now, r := s.opts.Now(), r.WithContext(ctx)
	rates, err := s.lookup(r, key)
	var evs []events.Event
	if err == nil {
		evs, err = s.queryEvents(r, events.Query{Key: key, Since: now.Add(-cw.D), Max: maxChartEvts})
	}
	var png []byte
	if err == nil {
		png, err = renderChart(ctx, key, cw, rates, evs, now)
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("chart not drawn within its deadline", "key", key, "timeout", chartTimeout)
		chartBusy(w, "the chart took too long to draw")
	case err != nil:
		s.fail(w, r, http.StatusInternalServerError, err)
	default:
		w.Header().Set("Content-Type", "image/png")
		w.Write(png)
	}
}

// chartBusy answers 503 with Retry-After, saying why.
func chartBusy(w http.ResponseWriter, why string) {
	w.Header().Set("Retry-After", chartRetry)
	http.Error(w, "chart: "+why+"; try again in "+chartRetry+" s", http.StatusServiceUnavailable)
}

// sample is the key's rate under one limit, from an event or the state,
// and the refusals it stands for.
type sample struct {
	t       time.Time
	rate    float64
	refused int
}

// rateSeries is one limit's line: between samples the rate decays as
// r·e^(−Δt/period), as the average does with no traffic.
func rateSeries(samples []sample, period time.Duration, now time.Time) plotter.XYs {
	var xys plotter.XYs
	x := func(t time.Time) float64 { return float64(t.Unix()) }
	steps := min(24, max(1, chartPoints/max(len(samples), 1)))
	for i, sm := range samples {
		if i > 0 {
			prev, decayed := samples[i-1], samples[i-1].rate
			if period > 0 {
				decayed *= math.Exp(-sm.t.Sub(prev.t).Seconds() / period.Seconds())
			}
			xys = chart.Decay(xys, x(prev.t), prev.rate, x(sm.t), decayed, steps)
		}
		xys = append(xys, plotter.XY{X: x(sm.t), Y: sm.rate})
	}
	return xys
}

// thin keeps of samples (sorted by time) the highest rate of each of n
// equal slots between from and to, with the slot's refusals.
func thin(samples []sample, from, to time.Time, n int) []sample {
	if len(samples) <= n || !to.After(from) {
		return samples
	}
	out := samples[:0:0]
	slot := func(t time.Time) int { return int(float64(n) * float64(t.Sub(from)) / float64(to.Sub(from))) }
	for _, sm := range samples {
		if k := len(out) - 1; k >= 0 && slot(out[k].t) == slot(sm.t) {
			refused := out[k].refused + sm.refused
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

// renderChart draws a panel per limit over cw: the rate line, the limit
// (dashed), the refusals (crosses, larger for more); ctx's error once it
// ends.
func renderChart(ctx context.Context, key string, cw chartWindow, rates []policy.KeyRate, evs []events.Event, now time.Time) ([]byte, error) {
	samples := map[string][]sample{} // by limit; rates gains the limits of events only
	for _, kr := range rates {
		samples[kr.Limit] = []sample{{t: now, rate: kr.Rate}}
	}
	for _, e := range evs {
		if e.Limit == "" || e.Rate <= 0 {
			continue
		}
		if _, ok := samples[e.Limit]; !ok {
			rates = append(rates, policy.KeyRate{Limit: e.Limit, Max: e.Max})
		}
		sm := sample{t: e.Time, rate: e.Rate}
		if slices.Contains(events.Refusals, e.Action) {
			sm.refused = max(e.Count, 1)
		}
		samples[e.Limit] = append(samples[e.Limit], sm)
	}
	var plots []*plot.Plot
	for _, kr := range rates {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sms := samples[kr.Limit]
		slices.SortStableFunc(sms, func(a, b sample) int { return a.t.Compare(b.t) })
		p, err := chartPanelPlot(key, cw, kr, thin(sms, now.Add(-cw.D), now, chartPoints), now)
		if err != nil {
			return nil, err
		}
		plots = append(plots, p)
	}
	if len(plots) == 0 {
		p := plot.New()
		p.Title.Text = key + ": no rate state and no events in the last 24 h"
		p.HideAxes()
		plots = append(plots, p)
	}
	var b bytes.Buffer
	if err := chart.Stack(ctx, &b, chart.PNG, chartPage, plots, nil); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	return b.Bytes(), nil
}

func chartPanelPlot(key string, cw chartWindow, kr policy.KeyRate, samples []sample, now time.Time) (*plot.Plot, error) {
	max := kr.Max
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s under %s (limit %s per %s)", key, kr.Limit, human.Number(max), dur(kr.Period))
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Min, p.X.Max = float64(now.Add(-cw.D).Unix()), float64(now.Unix())
	p.X.Tick.Marker = cw
	p.X.Label.Text = "time (UTC), the last " + cw.Name
	p.Y.Label.Text = "rate per period"
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	if err := chart.Line(p, &p.Legend, "limit", plotter.XYs{{X: p.X.Min, Y: max}, {X: p.X.Max, Y: max}}, chart.Red, 1.2, 6, 3); err != nil {
		return nil, err
	}
	if xys := rateSeries(samples, kr.Period, now); len(xys) > 0 {
		if err := chart.Line(p, &p.Legend, "rate", xys, chart.Blue, 1.5); err != nil {
			return nil, err
		}
		if len(xys) == 1 {
			if _, err := chart.Markers(p, &p.Legend, "", xys, draw.GlyphStyle{Color: chart.Blue, Radius: vg.Points(3), Shape: draw.CircleGlyph{}}); err != nil {
				return nil, err
			}
		}
	}
	var refused plotter.XYs
	var counts []int
	total, top := 0, max
	for _, sm := range samples {
		if top = math.Max(top, sm.rate); sm.refused > 0 {
			refused = append(refused, plotter.XY{X: float64(sm.t.Unix()), Y: sm.rate})
			counts = append(counts, sm.refused)
			total += sm.refused
		}
	}
	if len(refused) > 0 {
		sc, err := chart.Markers(p, &p.Legend, fmt.Sprintf("refused (%d)", total), refused, draw.GlyphStyle{Color: chart.Red, Radius: vg.Points(2.5), Shape: draw.CrossGlyph{}})
		if err != nil {
			return nil, err
		}
		sc.GlyphStyleFunc = func(i int) draw.GlyphStyle {
			g := sc.GlyphStyle
			g.Radius *= vg.Length(1 + math.Log10(float64(counts[i])))
			return g
		}
	}
	if p.Y.Max = top * 1.15; p.Y.Max == 0 {
		p.Y.Max = 1
	}
	p.Legend.Top, p.Legend.Left = false, true // bottom left: the limit line runs along the top
	// Add widened the axis to the data: clip to the window.
	p.X.Min, p.X.Max = float64(now.Add(-cw.D).Unix()), float64(now.Unix())
	return p, nil
}
