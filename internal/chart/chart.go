// Package chart draws rate-over-time panels with gonum.org/v1/plot, for
// the plots of ratelimitd simulate and the web console's key chart.
package chart

import (
	"context"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Image formats of Stack.
const (
	SVG = "svg"
	PNG = "png"
)

// Colours: Blue for a rate line, Red for refusals, Grey for a limit.
var (
	Blue = color.RGBA{31, 119, 180, 255}
	Red  = color.RGBA{214, 39, 40, 255}
	Grey = color.RGBA{90, 90, 90, 255}
)

// Page is the size of a stacked image: Width, the height of each Panel,
// and the resolution of a PNG in dots per inch.
type Page struct {
	Width, Panel vg.Length
	DPI          int
}

// Stack draws plots one above the other on a white page in format (SVG,
// else PNG) to w, each of legends (if not nil) right of its panel. It
// returns ctx's error once ctx ends.
func Stack(ctx context.Context, w io.Writer, format string, pg Page, plots []*plot.Plot, legends []plot.Legend) error {
	legendW := vg.Length(0)
	if legends != nil {
		legendW = 1.5 * vg.Inch
		for _, lg := range legends {
			var c draw.Canvas
			legendW = max(legendW, lg.Rectangle(c).Size().X+0.3*vg.Inch)
		}
		legendW = min(legendW, 3.5*vg.Inch)
	}
	width, height := pg.Width+legendW, pg.Panel*vg.Length(len(plots))
	var canvas io.WriterTo
	var dc draw.Canvas
	if format == SVG {
		c := vgsvg.New(width, height)
		canvas, dc = c, draw.New(c)
		dc.FillPolygon(color.White, []vg.Point{dc.Min, {X: dc.Max.X, Y: dc.Min.Y}, dc.Max, {X: dc.Min.X, Y: dc.Max.Y}})
	} else {
		c := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(pg.DPI), vgimg.UseBackgroundColor(color.White))
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: 0.2 * vg.Inch, PadTop: 0.1 * vg.Inch,
		PadBottom: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.15 * vg.Inch}
	grid := make([][]*plot.Plot, len(plots))
	for i, p := range plots {
		grid[i] = []*plot.Plot{p}
	}
	canvases := plot.Align(grid, tiles, draw.Crop(dc, 0, -legendW, 0, 0))
	for i, p := range plots {
		if err := ctx.Err(); err != nil {
			return err
		}
		pc := canvases[i][0]
		p.Draw(pc)
		if legends != nil {
			lc := pc
			lc.Min.X, lc.Max.X = pc.Max.X+0.1*vg.Inch, dc.Max.X-0.1*vg.Inch
			lc.Max.Y -= 0.3 * vg.Inch // below the title
			legends[i].Draw(lc)
		}
	}
	_, err := canvas.WriteTo(w)
	return err
}

// Line adds to p the line through xys in c, width points wide, dashed by
// dashes (points; none: solid), and to lg as label. Its error is
// plotter.NewLine's.
func Line(p *plot.Plot, lg *plot.Legend, label string, xys plotter.XYs, c color.Color, width float64, dashes ...float64) error {
	ln, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	ln.Color, ln.Width = c, vg.Points(width)
	for _, d := range dashes {
		ln.Dashes = append(ln.Dashes, vg.Points(d))
	}
	p.Add(ln)
	lg.Add(label, ln)
	return nil
}

// Markers adds a glyph g at each of xys to p, and to lg as label unless
// label is "".
func Markers(p *plot.Plot, lg *plot.Legend, label string, xys plotter.XYs, g draw.GlyphStyle) (*plotter.Scatter, error) {
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle = g
	p.Add(sc)
	if label != "" {
		lg.Add(label, sc)
	}
	return sc, nil
}

// Decay appends to xys steps points of the geometric curve from (x0, y0)
// to (x1, y1), the last (x1, y1): the path of an exponential decay. With
// y0 or y1 not above 0 it appends (x1, y1) only.
func Decay(xys plotter.XYs, x0, y0, x1, y1 float64, steps int) plotter.XYs {
	if y0 > 0 && y1 > 0 {
		for k := 1; k < steps; k++ {
			f := float64(k) / float64(steps)
			xys = append(xys, plotter.XY{X: x0 + f*(x1-x0), Y: y0 * math.Pow(y1/y0, f)})
		}
	}
	return append(xys, plotter.XY{X: x1, Y: y1})
}
