package web

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
)

// benchChart draws n refusals, 4 s apart, under one limit.
func benchChart(b *testing.B, n int) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	evs := make([]events.Event, n)
	for i := range evs {
		evs[i] = events.Event{Time: now.Add(-time.Duration(i) * 4 * time.Second), Key: "k", Limit: "hourly", Action: "defer", Rate: 200 + float64(i%7), Max: 200}
	}
	rates := []policy.KeyRate{{Limit: "hourly", Key: "k", Rate: 200, Max: 200, Period: time.Hour}}
	for b.Loop() {
		if _, err := renderChart(b.Context(), "k", chartWindows[2], rates, evs, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderChartFullWindow draws a day of maxChartEvts refusals
// under one limit: the bound on one render's work.
func BenchmarkRenderChartFullWindow(b *testing.B) { benchChart(b, maxChartEvts) }

// BenchmarkRenderChartFewEvents is the fixed cost of a chart.
func BenchmarkRenderChartFewEvents(b *testing.B) { benchChart(b, 10) }
