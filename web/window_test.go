package web

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
)

// rateLineStart is where the rate line (rateColor) begins in the top half
// of img, as a fraction of its width; -1 if it has no such pixel. The
// legend's sample of the line is in the bottom half.
func rateLineStart(img image.Image) float64 {
	b := img.Bounds()
	for x := b.Min.X; x < b.Max.X; x++ {
		for y := b.Min.Y; y < b.Min.Y+b.Dy()/2; y++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r>>8 < 90 && g>>8 > 90 && g>>8 < 150 && bl>>8 > 150 {
				return float64(x-b.Min.X) / float64(b.Dx())
			}
		}
	}
	return -1
}

// TestChartWindow: a refusal 30 minutes ago starts the rate line near the
// middle of the 1-hour chart and at the right edge of the 24-hour one;
// another window is 400, for the chart and the key page.
func TestChartWindow(t *testing.T) {
	f := newFixture(t, false)
	f.rates.rates = []policy.KeyRate{{Limit: "hourly", Key: "alice", Rate: 150, Max: 200, Period: time.Hour}}
	f.events.Record(events.Event{Time: f.now.Add(-30 * time.Minute), Key: "alice", Limit: "hourly", Action: "defer", Rate: 210, Max: 200})
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	for _, tc := range []struct {
		window   string
		from, to float64
	}{{"1h", 0.4, 0.65}, {"24h", 0.9, 1}, {"", 0.9, 1}} {
		resp, err := c.Get(f.ts.URL + "/chart.png?key=alice&window=" + tc.window)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		img, err := png.Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("window %q: %s %v", tc.window, resp.Status, err)
		}
		if x := rateLineStart(img); x < tc.from || x > tc.to {
			t.Errorf("window %q: the rate line starts at %.2f of the width, want %.2f to %.2f", tc.window, x, tc.from, tc.to)
		}
	}
	for _, p := range []string{"/chart.png?key=alice&window=2h", "/keys/alice?window=2h"} {
		if resp, page := get(t, c, f.ts.URL+p); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "want 1h, 6h, 24h or 7d") {
			t.Errorf("%s: %s", p, resp.Status)
		}
	}
}

// TestKeyPageWindows: the key page links every window, marks the one
// shown and asks for its chart; the overview links a refused key at the
// shortest window that shows its last refusal.
func TestKeyPageWindows(t *testing.T) {
	f := newFixture(t, false)
	f.events.Record(events.Event{Time: f.now.Add(-10 * time.Minute), Key: "alice", Limit: "hourly", Action: "defer", Rate: 210, Max: 200})
	f.events.Record(events.Event{Time: f.now.Add(-3 * time.Hour), Key: "bob", Limit: "hourly", Action: "defer", Rate: 210, Max: 200})
	f.events.Record(events.Event{Time: f.now.Add(-20 * time.Hour), Key: "carol", Limit: "daily", Action: "reject", Rate: 1001, Max: 1000})
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	_, page := get(t, c, f.ts.URL+"/keys/alice")
	for _, want := range []string{"<strong>24h</strong>", `href="/keys/alice?window=1h"`, `href="/keys/alice?window=7d"`, `src="/chart.png?key=alice&amp;window=24h"`} {
		if !strings.Contains(page, want) {
			t.Errorf("key page without ?window= lacks %s", want)
		}
	}
	_, page = get(t, c, f.ts.URL+"/keys/alice?window=1h")
	for _, want := range []string{"Rate over the last 1h", "<strong>1h</strong>", `href="/keys/alice?window=24h"`, `src="/chart.png?key=alice&amp;window=1h"`} {
		if !strings.Contains(page, want) {
			t.Errorf("key page at 1h lacks %s", want)
		}
	}
	_, page = get(t, c, f.ts.URL+"/")
	for _, want := range []string{`href="/keys/alice?window=1h"`, `href="/keys/bob?window=6h"`, `href="/keys/carol?window=24h"`} {
		if !strings.Contains(page, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
}

// TestGroupEvents: consecutive decisions of one key, limit and action are
// one row (counts added, first to last time, highest rate); a different
// action between them, or an operator's action, is a row of its own.
func TestGroupEvents(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 3, 1, 12, m, 0, 0, time.UTC) }
	ev := func(m, count int, action string, rate float64) events.Event {
		return events.Event{Time: at(m), Last: at(m), Count: count, Key: "alice", Limit: "hourly", Action: action, Rate: rate}
	}
	got := group([]events.Event{ // newest first
		ev(9, 2, "defer", 201), ev(8, 3, "defer", 205), ev(7, 1, "reject", 300), ev(6, 1, "defer", 201),
		ev(5, 1, "thaw", 0), ev(4, 1, "thaw", 0), {Time: at(3), Key: "alice", Limit: "hourly", Action: "defer"},
	})
	want := []string{"defer 5 12:08-12:09 205", "reject 1 12:07-12:07 300", "defer 1 12:06-12:06 201",
		"thaw 1 12:05-12:05 0", "thaw 1 12:04-12:04 0", "defer 1 12:03-12:03 0"}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(got), len(want), got)
	}
	for i, e := range got {
		if s := fmt.Sprintf("%s %d %s-%s %g", e.Action, e.Count, e.Time.Format("15:04"), e.Last.Format("15:04"), e.Rate); s != want[i] {
			t.Errorf("row %d: %s, want %s", i, s, want[i])
		}
	}
}

func TestSpan(t *testing.T) {
	at := time.Date(2026, 12, 1, 23, 58, 7, 400, time.UTC)
	for _, tc := range []struct {
		last time.Time
		want string
	}{
		{at.Add(300 * time.Millisecond), "Dec 01 23:58:07"},
		{at.Add(time.Minute), "Dec 01 23:58:07–23:59:07"},
		{at.Add(5 * time.Minute), "Dec 01 23:58–Dec 02 00:03"},
	} {
		if got := span(at, tc.last); got != tc.want {
			t.Errorf("span to %s: %q, want %q", tc.last, got, tc.want)
		}
	}
}

// TestThinAddsRefusals: samples thinned into one slot keep the highest
// rate and the refusals of all (coalesced events' counts).
func TestThinAddsRefusals(t *testing.T) {
	from := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	got := thin([]sample{{from.Add(time.Second), 201, 5}, {from.Add(2 * time.Second), 205, 3}, {from.Add(30 * time.Minute), 150, 0}},
		from, from.Add(time.Hour), 2)
	if len(got) != 2 || got[0].rate != 205 || got[0].refused != 8 || got[1].refused != 0 {
		t.Fatalf("thinned: %+v", got)
	}
}

// TestChartKeepsWindow: a sample before the window (the rate decaying
// into it) does not widen the 1-hour axis.
func TestChartKeepsWindow(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	evs := []events.Event{
		{Time: now.Add(-30 * time.Minute), Key: "k", Limit: "hourly", Action: "defer", Rate: 210, Max: 200},
		{Time: now.Add(-5 * time.Hour), Key: "k", Limit: "hourly", Action: "defer", Rate: 210, Max: 200},
	}
	b, err := renderChart(t.Context(), "k", chartWindows[0], []policy.KeyRate{{Limit: "hourly", Key: "k", Rate: 150, Max: 200, Period: time.Hour}}, evs, now)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if x := rateLineStart(img); x < 0.4 || x > 0.65 {
		t.Errorf("the rate line's rise starts at %.2f of the width, want 0.4 to 0.65 (the axis is the hour)", x)
	}
}
