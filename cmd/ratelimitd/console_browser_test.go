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
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/internal/redistest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// The console's tests in a real browser: Debian's chromium, headless,
// driven over the Chrome DevTools Protocol by chromedp. A missing browser
// fails the test (scripts/deps.sh installs chromium).

// browser is one headless chromium with a fresh profile, and the network
// requests its pages made.
type browser struct {
	t      *testing.T
	ctx    context.Context
	origin string // the console's "http://host:port"

	mu        sync.Mutex
	requests  []string         // every URL requested
	responses map[string]int64 // URL → status of its last response
	reqMethod map[network.RequestID]string
}

// chromiumPath finds Debian's chromium; the test fails without it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed: run scripts/deps.sh (apt-get install chromium); the console's browser tests need it")
	return ""
}

// newBrowser starts chromium for the console at base ("http://host:port/").
func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &browser{t: t, origin: u.Scheme + "://" + u.Host, responses: map[string]int64{}, reqMethod: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithListener(b.listen))
	t.Cleanup(func() { cancel(); acancel() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("chromium: %v", err)
	}
	b.ctx = ctx
	return b
}

// tab opens a second, separate browser context (its own cookies) in the
// same chromium: another user.
func (b *browser) tab() *browser {
	b.t.Helper()
	o := &browser{t: b.t, origin: b.origin, responses: map[string]int64{}, reqMethod: map[network.RequestID]string{}}
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext(), chromedp.WithListener(o.listen))
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("chromium tab: %v", err)
	}
	o.ctx = ctx
	return o
}

func (b *browser) listen(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		b.requests = append(b.requests, e.Request.URL)
		b.reqMethod[e.RequestID] = e.Request.Method
	case *network.EventResponseReceived:
		key := e.Response.URL
		if m := b.reqMethod[e.RequestID]; m != "" && m != "GET" {
			key = m + " " + key
		}
		b.responses[key] = e.Response.Status
	}
}

// status is the last response status seen for url (method "GET" or
// "POST").
func (b *browser) status(method, u string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if method != "GET" {
		u = method + " " + u
	}
	return b.responses[u]
}

// outside lists the requests that left the console's origin.
func (b *browser) outside() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, r := range b.requests {
		if !strings.HasPrefix(r, b.origin+"/") && !strings.HasPrefix(r, "data:") && r != "about:blank" {
			out = append(out, r)
		}
	}
	return out
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// count is the number of elements sel (CSS) matches now.
func (b *browser) count(sel string) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	n, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0)))
	if err != nil {
		b.t.Fatalf("nodes %s: %v", sel, err)
	}
	return len(n)
}

func (b *browser) location() string {
	b.t.Helper()
	l, err := chromedp.Run(b.ctx, chromedp.Location())
	if err != nil {
		b.t.Fatal(err)
	}
	return l
}

// open navigates to path and waits for the page's body.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("open "+path, chromedp.Navigate(b.origin+path), chromedp.WaitReady("body"))
}

// submit clicks a form's button and waits for the next page.
func (b *browser) submit(sel string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.RunResponse(ctx, chromedp.Click(sel)); err != nil {
		b.t.Fatalf("submit %s: %v", sel, err)
	}
	b.do("wait for the page", chromedp.WaitReady("body"))
}

// login fills the login form and submits it.
func (b *browser) login(user, password string) {
	b.t.Helper()
	b.open("/login")
	b.do("log in as "+user,
		chromedp.SendKeys(chromedp.ID("username"), user),
		chromedp.SendKeys(chromedp.ID("password"), password))
	b.submit(`form[action="/login"] button`)
	if b.count("header .who") == 0 {
		b.t.Fatalf("login as %s failed: at %s:\n%s", user, b.location(), b.text("body"))
	}
	if got := b.text("header .who"); !strings.Contains(got, user) {
		b.t.Fatalf("after login as %s the header says %q (at %s)", user, got, b.location())
	}
}

// screenshot saves the whole page as a PNG under dir and logs its path.
func (b *browser) screenshot(dir, name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot of the %s page: %s", name, p)
	return p
}

// cookie returns the browser's session cookie for the console.
func (b *browser) cookie(name string) string {
	b.t.Helper()
	var v string
	b.do("read cookies", chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		res, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{URLs: []string{b.origin + "/"}})
		for _, c := range res.Cookies {
			if c.Name == name {
				v = c.Value
			}
		}
		return err
	}))
	return v
}

// consoleUsers adds an operator "op" and a viewer "view" with the CLI
// and returns their password.
func consoleUsers(t *testing.T, cfgPath string) string {
	t.Helper()
	const pw = "console-test-password"
	for user, role := range map[string]string{"op": "operator", "view": "viewer"} {
		if code, out, errs := runCLI(t, pw+"\n", "--config", cfgPath, "web", "user", "add", user, "--role", role, "--password-stdin"); code != 0 {
			t.Fatalf("web user add %s: %d %s %s", user, code, out, errs)
		}
	}
	return pw
}

// webConfig is the [web] table of a test daemon on a free port.
func webConfig(t *testing.T, dir string) string {
	return fmt.Sprintf("\n[web]\nlisten = \"127.0.0.1:%d\"\nusers_file = %q\n", freePort(t), filepath.Join(dir, "web-users"))
}

// postWithout posts form to the console with the session cookie but
// without the CSRF token, as a forged cross-site form would, and returns
// the status.
func postWithout(t *testing.T, base, session, path string) int {
	t.Helper()
	req, _ := http.NewRequest("POST", strings.TrimSuffix(base, "/")+path, strings.NewReader("limit="))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: "ratelimitd_session", Value: session})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConsoleBrowserBurst: a daemon with the default limits (200/h defer
// for each SASL user) gets a 205-message burst from alice over the policy
// port. In chromium the operator logs in; the overview lists alice as
// refusing now and refused 5 times in the last 24 hours; her key page
// shows each limit and the rate chart (a PNG the browser loaded); a reset
// submitted from the page is recorded with the operator's name; a POST
// without the CSRF token gets 403, in the browser (token blanked in the
// form) and from outside with the session cookie. No request leaves the
// console's origin. Screenshots of the overview and key pages are saved.
func TestConsoleBrowserBurst(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), webConfig(t, dir))
	pw := consoleUsers(t, cfgPath)
	td := startTestDaemon(t, cfgPath)
	base := "http://" + td.d.WebAddr() + "/"

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deferred := 0
	for i := 0; i < 205; i++ {
		if got := policyQuery(t, addr, "alice", "END-OF-MESSAGE"); strings.HasPrefix(got, "action=450 4.7.1") {
			deferred++
		} else if got != "action=DUNNO" {
			t.Fatalf("message %d: %s", i+1, got)
		}
	}
	if deferred != 5 {
		t.Fatalf("%d of 205 deferred, want 5", deferred)
	}

	b := newBrowser(t, base)
	b.open("/")
	if !strings.HasSuffix(b.location(), "/login?next=%2F") {
		t.Fatalf("without a session / went to %s, want the login page", b.location())
	}
	b.login("op", pw)
	shots := screenshotDir(t)

	b.open("/")
	count := b.text(`#refused tr:has(a[href="/keys/alice?window=1h"]) td.count`)
	if count != "5" {
		t.Fatalf("overview: alice refused %q times, want 5\n%s", count, b.text("main"))
	}
	if over := b.text("#over"); !strings.Contains(over, "alice") || !strings.Contains(over, "refusing") {
		t.Fatalf("overview does not list alice as refusing now:\n%s", over)
	}
	if h := b.text("#health"); !strings.Contains(h, "local") {
		t.Errorf("store state: %s", h)
	}
	b.screenshot(shots, "overview")

	b.submit(`#refused a[href="/keys/alice?window=1h"]`)
	if lim := b.text("#limits"); !strings.Contains(lim, "hourly") || !strings.Contains(lim, "refusing") || !strings.Contains(lim, "daily") {
		t.Fatalf("key page limits:\n%s", lim)
	}
	b.do("wait for the chart", chromedp.WaitVisible("#chart"))
	var width int
	b.do("chart size", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		var err error
		width, err = chromedp.Run(ctx, chromedp.JavascriptAttribute[int]("#chart", "naturalWidth"))
		return err
	}))
	if width < 500 {
		t.Fatalf("the chart did not load (naturalWidth %d)", width)
	}
	if st := b.status("GET", b.origin+"/chart.png?key=alice&window=1h"); st != 200 {
		t.Fatalf("chart request: status %d", st)
	}
	b.screenshot(shots, "key")

	// The reset form with its token blanked: the browser posts without a
	// valid token and gets 403; nothing is reset.
	b.do("blank the token", chromedp.SetAttributeValue(`form[action="/keys/alice/reset"] input[name="csrf"]`, "value", ""))
	b.submit("#reset")
	if st := b.status("POST", b.origin+"/keys/alice/reset"); st != http.StatusForbidden {
		t.Fatalf("POST without the CSRF token: status %d, want 403", st)
	}
	// The state, not a policy query: at exactly 200/h a query made after
	// the browser steps may find the rate decayed just below the limit.
	notReset := func(when string) {
		t.Helper()
		krs, err := td.d.Rates().Lookup(context.Background(), time.Now(), "alice")
		if err != nil {
			t.Fatal(err)
		}
		for _, kr := range krs {
			if kr.Limit == "hourly" && kr.Rate > 100 {
				return
			}
		}
		t.Fatalf("%s reset the rate: %+v", when, krs)
	}
	notReset("the refused POST")
	if st := postWithout(t, base, b.cookie("ratelimitd_session"), "/keys/alice/reset"); st != http.StatusForbidden {
		t.Fatalf("POST with the session cookie but no token: %d, want 403", st)
	}
	notReset("the POST without a token")

	b.open("/keys/alice")
	b.submit("#reset")
	if !strings.Contains(b.text("main"), "Done: reset") {
		t.Fatalf("reset from the key page:\n%s", b.text("main"))
	}
	if got := policyQuery(t, addr, "alice", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Fatalf("after the console's reset alice is still refused: %s", got)
	}
	evs, err := td.d.Events().Query(context.Background(), eventsQuery("reset"))
	if err != nil || len(evs) != 1 || evs[0].By != "op (console)" || evs[0].Key != "alice" {
		t.Fatalf("reset event: %+v %v", evs, err)
	}
	if !strings.Contains(td.logs.String(), "console action") || strings.Contains(td.logs.String(), "$argon2id") {
		t.Fatalf("the action is not logged, or a hash is:\n%s", td.logs.String())
	}
	b.open("/events?key=alice&action=defer")
	// The burst's 5 defers are one event with a count (two if it
	// straddled a minute).
	if n, text := b.count("table.events tr")-1, b.text("table.events"); n < 1 || n > 2 || n == 1 && !strings.Contains(text, "defer ×5") {
		t.Fatalf("events page: %d rows of defers of alice, want the burst's 5 as one:\n%s", n, text)
	}
	if out := b.outside(); len(out) > 0 {
		t.Fatalf("the browser requested outside the console: %v", out)
	}
}

func eventsQuery(actions ...string) events.Query { return events.Query{Actions: actions} }

// screenshotDir is where a test saves its screenshots: the test's temp
// dir, or $RATELIMITD_SCREENSHOT_DIR/TESTNAME when set (kept after the
// test, to look at).
func screenshotDir(t *testing.T) string {
	if d := os.Getenv("RATELIMITD_SCREENSHOT_DIR"); d != "" {
		p := filepath.Join(d, t.Name())
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return t.TempDir()
}

// evilMarkup is what a hostile sender puts in its address and subject:
// a script and an image from outside the console.
const evilMarkup = `<script>alert(1)</script><img src=http://192.0.2.1/x.png>`

// evilMessage is an HTML message whose subject and body carry markup that
// would run a script and load remote images if rendered.
func evilMessage(from string) []byte {
	return []byte("From: " + from + "\r\nTo: rcpt@example.net\r\nSubject: newsletter part 05 " + evilMarkup +
		"\r\nMessage-ID: <evil@example.org>\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" +
		"<html><head><link rel=stylesheet href=\"http://192.0.2.1/s.css\"></head><body><p>Hello reader</p>" + evilMarkup +
		"<img src=\"http://192.0.2.1/track.gif\"><iframe src=\"http://192.0.2.1/\"></iframe></body></html>\r\n")
}

// TestConsoleBrowserQuarantine: a strict hold limit of 2 per hour on a
// real Postfix (policy delegation) delivers alice's first 2 messages and
// holds the next 3, the last from a sender and with a subject full of
// markup. In chromium the operator thaws part 03 through the confirmation
// page (delivered exactly once to the sink), deletes part 04 (gone from
// Postfix's queue); a viewer's thaw of the last one gets 403 and it stays
// held; its message page shows the markup as text, has no script or
// image element, and the browser made no request outside the console.
// Thaw and delete are recorded as events with the operator's name.
// Screenshot of the message page saved.
func TestConsoleBrowserQuarantine(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port)})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), webConfig(t, dir)+"\n[quarantine]\n"+pf.HoldCommands()+`
[[limit]]
name = "twohold"
key = ["sasl_username"]
limit = 2
period = "1h"
mode = "strict"
action = "hold"
via = ["policy"]
`)
	pw := consoleUsers(t, cfgPath)
	td := startTestDaemon(t, cfgPath)
	base := "http://" + td.d.WebAddr() + "/"

	for i := 1; i <= 4; i++ {
		if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", i)); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	evilFrom := `"` + evilMarkup + `"@example.org`
	if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7", From: evilFrom,
		To: []string{"rcpt@example.net"}, Data: evilMessage(evilFrom)}); err != nil {
		t.Fatalf("message 5: %v", err)
	}
	sink.WaitCount(t, 2, 30*time.Second)
	if _, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 3 }); len(held) != 3 {
		t.Fatalf("%d held, want 3", len(held))
	}
	// Which entry is which: the queue file's subject.
	ids := map[string]string{} // "03", "04", "05" → quarantine ID
	queueIDs := map[string]string{}
	entries := heldEntries(t, td, 3)
	for _, e := range entries {
		cat := pf.Cat(t, e.QueueID)
		for _, n := range []string{"03", "04", "05"} {
			if strings.Contains(cat, "newsletter part "+n) {
				ids[n], queueIDs[n] = e.ID, e.QueueID
			}
		}
	}
	if len(ids) != 3 {
		t.Fatalf("held entries: %+v", entries)
	}

	b := newBrowser(t, base)
	b.login("op", pw)
	shots := screenshotDir(t)
	b.open("/")
	if q := b.text("#quarantine"); !strings.Contains(q, "held\t3") {
		t.Errorf("overview quarantine counts:\n%q", q)
	}
	b.open("/quarantine")
	if n := b.count("#entries tr") - 1; n != 3 {
		t.Fatalf("quarantine page lists %d messages, want 3", n)
	}

	// Thaw part 03 through its confirmation page.
	b.submit(`#entries a[href="/quarantine/` + ids["03"] + `"]`)
	b.submit("#thaw")
	if !strings.Contains(b.text("h1"), "Thaw message "+ids["03"]) {
		t.Fatalf("no confirmation step: %s", b.text("main"))
	}
	b.submit("#confirm")
	if !strings.Contains(b.text("main"), "Done: thaw "+ids["03"]) {
		t.Fatalf("after thaw: %s\n%s", b.location(), b.text("main"))
	}
	sink.WaitCount(t, 3, 30*time.Second)
	time.Sleep(time.Second)
	got := 0
	for _, m := range sink.Messages() {
		if m.Header("Subject") == "newsletter part 03" {
			got++
		}
	}
	if got != 1 || sink.Count() != 3 {
		t.Fatalf("part 03 delivered %d times (sink has %d), want once", got, sink.Count())
	}

	// Delete part 04.
	b.open("/quarantine/" + ids["04"])
	b.submit("#delete")
	b.submit("#confirm")
	if !strings.Contains(b.text("main"), "Done: delete "+ids["04"]) {
		t.Fatalf("after delete: %s", b.text("main"))
	}
	all, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 1 })
	if slices.Contains(all, queueIDs["04"]) || len(held) != 1 || held[0] != queueIDs["05"] {
		t.Fatalf("after delete the queue has %v (held %v); part 04 was %s", all, held, queueIDs["04"])
	}

	// A viewer's thaw is refused and changes nothing: the confirmation
	// page itself is 403, with no form to submit.
	v := b.tab()
	v.login("view", pw)
	v.open("/quarantine/" + ids["05"] + "/confirm?op=thaw")
	if st := v.status("GET", v.origin+"/quarantine/"+ids["05"]+"/confirm?op=thaw"); st != http.StatusForbidden {
		t.Fatalf("viewer's confirmation page: status %d, want 403", st)
	}
	if txt := v.text("main"); !strings.Contains(txt, "may not act") {
		t.Fatalf("the viewer's confirmation page does not refuse:\n%s", txt)
	}
	time.Sleep(500 * time.Millisecond)
	if _, held := pf.QueueIDs(t); len(held) != 1 || sink.Count() != 3 {
		t.Fatalf("after the viewer's thaw: held %v, sink %d", held, sink.Count())
	}

	// The hostile message's page: the markup is text, nothing loads.
	b.open("/quarantine/" + ids["05"])
	if s := b.text("#sender"); !strings.Contains(s, evilMarkup) {
		t.Errorf("sender shown as %q, want the markup as text", s)
	}
	if h := b.text("#header"); !strings.Contains(h, "newsletter part 05 "+evilMarkup) {
		t.Errorf("header table:\n%s", h)
	}
	if p := b.text("#preview"); !strings.Contains(p, "Hello reader") {
		t.Errorf("preview:\n%s", p)
	}
	if n, m, f := b.count("script"), b.count("main img"), b.count("iframe"); n+m+f != 0 {
		t.Fatalf("the message page has %d script, %d img and %d iframe elements", n, m, f)
	}
	b.screenshot(shots, "message")
	for _, br := range []*browser{b, v} {
		if out := br.outside(); len(out) > 0 {
			t.Fatalf("the browser requested outside the console: %v", out)
		}
	}
	evs, err := td.d.Events().Query(context.Background(), eventsQuery("thaw", "delete"))
	if err != nil || len(evs) != 2 {
		t.Fatalf("events: %+v %v", evs, err)
	}
	for _, e := range evs {
		if e.By != "op (console)" || e.Key != "alice" {
			t.Errorf("event %+v: want by op (console), key alice", e)
		}
	}
}

// consoleClient logs in to the console at base over plain HTTP (a cookie
// jar) and returns the client and the session's CSRF token.
func consoleClient(t *testing.T, base, user, pw string) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	token := func(path string) string {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("no CSRF token on %s (%s):\n%s", path, resp.Status, b)
		}
		return string(m[1])
	}
	resp, err := c.PostForm(base+"login", url.Values{"csrf": {token("login")}, "username": {user}, "password": {pw}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return c, token("")
}

func getPage(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", u, resp.Status, b)
	}
	return string(b)
}

// TestConsoleWithRedisBackend: two daemons share one Redis; a burst
// through the first refuses walter, and the second daemon's console shows
// him refusing (the rate is Redis's), names the store "Redis", and its
// reset lets him through at the first daemon at once.
func TestConsoleWithRedisBackend(t *testing.T) {
	srv := redistest.Start(t)
	var addrs []string
	var tds []*testDaemon
	var pw string
	for range 2 {
		dir := t.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		cfg := writeConfig(t, dir, addr, redisConfig(srv.Addr, "local")+webConfig(t, dir))
		pw = consoleUsers(t, cfg)
		tds = append(tds, startTestDaemon(t, cfg))
		addrs = append(addrs, addr)
	}
	for i := 0; i < 205; i++ {
		policyQuery(t, addrs[0], "walter", "END-OF-MESSAGE")
	}
	if got := policyQuery(t, addrs[1], "walter", "END-OF-MESSAGE"); !strings.HasPrefix(got, "action=450") {
		t.Fatalf("the second daemon does not see the shared rate: %s", got)
	}
	base := "http://" + tds[1].d.WebAddr() + "/"
	c, csrf := consoleClient(t, base, "op", pw)
	if page := getPage(t, c, base); !strings.Contains(page, "Redis") || !regexp.MustCompile(`(?s)id="over".*walter.*refusing`).MatchString(page) {
		t.Fatalf("overview on the second daemon:\n%s", page)
	}
	if page := getPage(t, c, base+"keys/walter"); !regexp.MustCompile(`(?s)id="limits".*hourly.*refusing`).MatchString(page) {
		t.Fatalf("key page on the second daemon:\n%s", page)
	}
	resp, err := c.PostForm(base+"keys/walter/reset", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(resp.Request.URL.String(), "?done=reset") {
		t.Fatalf("reset: %s at %s", resp.Status, resp.Request.URL)
	}
	if got := policyQuery(t, addrs[0], "walter", "END-OF-MESSAGE"); got != "action=DUNNO" {
		t.Fatalf("after the console's reset on the second daemon the first answers %s", got)
	}
}

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
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), webConfig(t, dir)+"\n[quarantine]\n"+pf.HoldCommands()+
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
	entries := heldEntries(t, td, 3)
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
