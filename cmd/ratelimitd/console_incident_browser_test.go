//go:build integration

package main

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// longSender is an envelope sender long enough to overflow a table cell.
const longSender = "mallory.newsletter-campaign+bounces-2026-12-02-0001@mailing-lists.departments.example.org"

// TestConsoleBrowserIncident: carol sends a burst of 205 messages over the
// policy port (200/h defer: 5 refused); mallory, held above 2 per hour on
// a real Postfix, has 3 messages held with a long sender, six recipients
// and a long subject. In chromium at 1,280 px: the quarantine table does
// not overflow and its queue-ID cells are shown whole; the events page
// fits and shows carol's defers as one row whose date is on one line; a viewer
// sees no action link on a message or key page. The overview links carol
// at 1 h; once the burst is 45 s old, it spans several pixels of the
// 1-hour chart's right edge and a sliver of the 24-hour one. With
// $RATELIMITD_SCREENSHOTS set, the pages are saved there as PNGs.
func TestConsoleBrowserIncident(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port)})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), webConfig(t, dir)+"\n[quarantine]\n"+postfixHoldCommands(pf)+
		limitTable(`name = "hourly"`, `key = ["sasl_username"]`, "limit = 200", `period = "1h"`, `action = "defer"`)+
		limitTable(`name = "twohold"`, `key = ["sender"]`, "limit = 1000000", `period = "1h"`, `mode = "strict"`,
			`action = "hold"`, `via = ["policy"]`, fmt.Sprintf("overrides = { %q = 2 }", longSender)))
	pw := consoleUsers(t, cfgPath)
	td := startTestDaemon(t, cfgPath)
	base := "http://" + td.d.WebAddr() + "/"

	burst := time.Now()
	deferred := 0
	for range 205 {
		if got := policyQuery(t, fmt.Sprintf("127.0.0.1:%d", port), "carol", "END-OF-MESSAGE"); strings.HasPrefix(got, "action=450 4.7.1") {
			deferred++
		}
	}
	if deferred != 5 {
		t.Fatalf("%d of carol's 205 deferred, want 5", deferred)
	}
	rcpts := []string{"first.recipient@example.net", "second.recipient@example.net", "third@example.net", "fourth@example.net", "fifth@example.net", "sixth@example.net"}
	for i := 1; i <= 5; i++ {
		subject := fmt.Sprintf("Our December newsletter, part %02d: everything you wanted to know about rate limits", i)
		if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: "mallory", ClientAddr: "192.0.2.7", From: longSender, To: rcpts,
			Data: mtatest.BuildMessage(longSender, rcpts[0], subject, "Dear reader,\n")}); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	sink.WaitCount(t, 2, 30*time.Second)
	entries := heldWithQueueIDs(t, td, 3)
	if len(entries) != 3 {
		t.Fatalf("held entries: %+v", entries)
	}

	shots := os.Getenv("RATELIMITD_SCREENSHOTS")
	shot := func(b *browser, name string) {
		if shots != "" {
			b.screenshot(shots, name)
		}
	}
	b := newBrowser(t, base)
	b.login("op", pw)
	b.open("/quarantine")
	// The table fits the page, each queue-ID cell is inside the window
	// and shows its whole text.
	for i := range 3 {
		fit := eval[string](b, fmt.Sprintf(`(() => {
			const t = document.querySelector("#entries"), de = document.documentElement;
			const q = document.querySelectorAll("#entries tr")[%d+1].lastElementChild, r = q.getBoundingClientRect();
			return [t.scrollWidth <= t.clientWidth, de.scrollWidth <= de.clientWidth, r.right <= window.innerWidth,
				q.scrollWidth <= q.clientWidth, q.textContent].join(" ");
		})()`, i))
		qid, ok := strings.CutPrefix(fit, "true true true true ")
		if !ok || !slices.ContainsFunc(entries, func(e quarantine.Entry) bool { return e.QueueID == qid }) {
			t.Errorf("quarantine row %d at 1,280 px: table fits, page fits, queue-ID cell inside, not cut, text = %q", i, fit)
		}
	}
	shot(b, "quarantine")
	b.open("/events")
	if lines := eval[int](b, `(() => {
		const r = document.createRange();
		r.selectNodeContents(document.querySelector("table.events tr:nth-child(2) td"));
		return r.getClientRects().length;
	})()`); lines != 1 {
		t.Errorf("the events page's first date is on %d lines, want 1", lines)
	}
	if !eval[bool](b, `document.documentElement.scrollWidth <= document.documentElement.clientWidth`) {
		t.Errorf("the events page is wider than 1,280 px")
	}
	if n := b.count(`table.events tr:has(a[href="/keys/carol"])`); n < 1 || n > 2 {
		t.Errorf("carol's 5 defers are %d rows, want 1 (2 if the burst straddled a minute)", n)
	}
	shot(b, "events")

	v := b.tab()
	v.login("view", pw)
	for _, p := range []string{"/quarantine/" + entries[0].ID, "/keys/carol"} {
		v.open(p)
		if n := v.count("main form, #thaw, #delete, #thaw-reset"); n != 0 {
			t.Errorf("the viewer's %s has %d action forms or links", p, n)
		}
	}

	// Let the burst age so that its width on a chart depends on the window.
	time.Sleep(time.Until(burst.Add(45 * time.Second)))
	b.open("/")
	shot(b, "overview")
	b.submit(`#refused a[href="/keys/carol?window=1h"]`)
	b.do("wait for the chart", chromedp.WaitVisible("#chart"))
	if h := b.text("main h2:nth-of-type(2)"); h != "Rate over the last 1h" {
		t.Errorf("key page from the overview: %q", h)
	}
	shot(b, "key-1h")
	b.open("/keys/carol?window=7d")
	b.do("wait for the chart", chromedp.WaitVisible("#chart"))
	shot(b, "key-7d")
	hour := rateSpan(t, base, b.cookie("ratelimitd_session"), "1h")
	day := rateSpan(t, base, b.cookie("ratelimitd_session"), "24h")
	if hour[1]-hour[0] < 6 || hour[1] < 0.85*float64(hour[2]) || day[1]-day[0] > (hour[1]-hour[0])/3 {
		t.Fatalf("carol's burst: the rate line spans x %v on the 1-hour chart and %v on the 24-hour one (from, to, width): want several pixels at the right of the first, a sliver of the second", hour, day)
	}
	for _, br := range []*browser{b, v} {
		if out := br.outside(); len(out) > 0 {
			t.Fatalf("the browser requested outside the console: %v", out)
		}
	}
}

// heldWithQueueIDs waits up to 30 s for n quarantine entries that all
// have a queue ID and returns the entries it last listed.
func heldWithQueueIDs(t *testing.T, td *testDaemon, n int) []quarantine.Entry {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		entries, err := td.d.Quarantine().List(quarantine.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		ok := len(entries) == n
		for _, e := range entries {
			ok = ok && e.QueueID != ""
		}
		if ok || time.Now().After(deadline) {
			return entries
		}
	}
}

// eval is the value of the JavaScript expression js in b's page.
func eval[T any](b *browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// rateSpan fetches carol's chart over window and returns the x range of
// its rate line (rateColor) in the top half of the image, and the
// image's width, in pixels.
func rateSpan(t *testing.T, base, session, window string) [3]float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"chart.png?key=carol&window="+window, nil)
	req.AddCookie(&http.Cookie{Name: "ratelimitd_session", Value: session})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("chart over %s: %s %v", window, resp.Status, err)
	}
	r := img.Bounds()
	span := [3]float64{-1, -1, float64(r.Dx())}
	for x := r.Min.X; x < r.Max.X; x++ {
		for y := r.Min.Y; y < r.Min.Y+r.Dy()/2; y++ {
			if blue(img, x, y) {
				if span[0] < 0 {
					span[0] = float64(x)
				}
				span[1] = float64(x)
			}
		}
	}
	return span
}

// blue says whether the pixel is the chart's rate colour (31, 119, 180).
func blue(img image.Image, x, y int) bool {
	r, g, b, _ := img.At(x, y).RGBA()
	return r>>8 < 90 && g>>8 > 90 && g>>8 < 150 && b>>8 > 150
}
