package web

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestMain makes new password hashes cheap (1 pass, 1 MiB) except where a
// test restores the production cost.
func TestMain(m *testing.M) {
	hashCost.time, hashCost.memory = 1, 1024
	os.Exit(m.Run())
}

type fixture struct {
	srv    *Server
	ts     *httptest.Server
	rates  *fakeRates
	q      *fakeQuarantine
	events *events.Log
	now    time.Time
}

// newFixture starts a console over fakes with an operator "op" and a
// viewer "view" (password "secret-password").
func newFixture(t *testing.T, tlsOn bool) *fixture {
	t.Helper()
	dir := t.TempDir()
	users := &Users{byName: map[string]User{}}
	for name, role := range map[string]Role{"op": Operator, "view": Viewer} {
		if err := users.Set(name, role, []byte("secret-password")); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(dir, "web-users")
	if err := users.Save(path); err != nil {
		t.Fatal(err)
	}
	f := &fixture{rates: &fakeRates{}, q: &fakeQuarantine{entries: map[string]quarantine.Entry{}, msgs: map[string][]byte{}},
		now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	f.events = newEventLog(t, func() time.Time { return f.now })
	srv, err := New(Options{UsersFile: path, Services: admin.Local{RateState: f.rates, Quarantine: f.q, Events: f.events},
		Now: func() time.Time { return f.now }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	if tlsOn {
		f.ts = httptest.NewTLSServer(srv.Handler())
	} else {
		f.ts = httptest.NewServer(srv.Handler())
	}
	t.Cleanup(f.ts.Close)
	return f
}

// client is one browser: a cookie jar, redirects not followed.
func (f *fixture) client(t *testing.T) *http.Client {
	jar, _ := cookiejar.New(nil)
	c := *f.ts.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func get(t *testing.T, c *http.Client, u string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (*http.Response, string) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no csrf field in\n%s", page)
	}
	return m[1]
}

// login logs c in as name and returns the session's CSRF token.
func (f *fixture) login(t *testing.T, c *http.Client, name, password string) (*http.Response, string) {
	t.Helper()
	_, page := get(t, c, f.ts.URL+"/login")
	resp, _ := post(t, c, f.ts.URL+"/login", url.Values{"csrf": {csrfOf(t, page)}, "username": {name}, "password": {password}})
	if resp.StatusCode != http.StatusSeeOther {
		return resp, ""
	}
	_, home := get(t, c, f.ts.URL+"/")
	return resp, csrfOf(t, home)
}

func TestPagesNeedASession(t *testing.T) {
	f := newFixture(t, false)
	c := f.client(t)
	for _, p := range []string{"/", "/keys/alice", "/quarantine", "/events", "/chart.png?key=alice", "/quarantine/x/confirm?op=thaw"} {
		resp, _ := get(t, c, f.ts.URL+p)
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
			t.Errorf("GET %s without a session: %s to %q, want 303 to /login", p, resp.Status, resp.Header.Get("Location"))
		}
	}
	resp, _ := post(t, c, f.ts.URL+"/keys/alice/reset", url.Values{"csrf": {"x"}})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without a session: %s, want 403", resp.Status)
	}
	resp, _ = get(t, c, f.ts.URL+"/login")
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /login: %s", resp.Status)
	}
}

func TestSessionCookie(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		f := newFixture(t, tlsOn)
		c := f.client(t)
		resp, csrf := f.login(t, c, "op", "secret-password")
		if csrf == "" {
			t.Fatalf("tls=%v: login: %s", tlsOn, resp.Status)
		}
		var sc *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == cookieName {
				sc = ck
			}
		}
		if sc == nil {
			t.Fatalf("no session cookie")
		}
		if !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Secure != tlsOn || len(sc.Value) < 40 {
			t.Errorf("tls=%v: cookie %+v: want HttpOnly, SameSite=Strict, Secure=%v, 32 random bytes", tlsOn, sc, tlsOn)
		}
		// Logging out ends the session on the server, not just in the jar.
		post(t, c, f.ts.URL+"/logout", url.Values{"csrf": {csrf}})
		if _, ok := f.srv.sessions.get(sc.Value, f.now); ok {
			t.Errorf("session alive after logout")
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	f := newFixture(t, false)
	resp, _ := get(t, f.client(t), f.ts.URL+"/login")
	got := resp.Header.Get("Content-Security-Policy")
	for _, want := range []string{"default-src 'none'", "img-src 'self' data:", "style-src 'self'", "frame-ancestors 'none'", "form-action 'self'"} {
		if !strings.Contains(got, want) {
			t.Errorf("CSP %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "unsafe-inline") || strings.Contains(got, "script-src") || strings.Contains(got, "http") {
		t.Errorf("CSP %q allows scripts, inline code or a remote origin", got)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("headers %v", resp.Header)
	}
}

func TestPostNeedsCSRFTokenAndOperator(t *testing.T) {
	f := newFixture(t, false)
	f.q.entries["0000000000000001"] = quarantine.Entry{ID: "0000000000000001", State: quarantine.Held, Key: "alice"}
	op := f.client(t)
	_, csrf := f.login(t, op, "op", "secret-password")
	for _, form := range []url.Values{{}, {"csrf": {"wrong"}}, {"csrf": {csrf + "x"}}} {
		resp, _ := post(t, op, f.ts.URL+"/quarantine/0000000000000001/thaw", form)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("thaw with csrf %q: %s, want 403", form.Get("csrf"), resp.Status)
		}
	}
	// A form posted from another origin is refused even with the token.
	req, _ := http.NewRequest("POST", f.ts.URL+"/keys/alice/reset", strings.NewReader("csrf="+url.QueryEscape(csrf)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://evil.example")
	if resp, err := op.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin POST: %v %v, want 403", resp.Status, err)
	}
	if len(f.q.thawed) != 0 || len(f.rates.resets) != 0 {
		t.Fatalf("acted without a valid token: %v %v", f.q.thawed, f.rates.resets)
	}

	viewer := f.client(t)
	_, vcsrf := f.login(t, viewer, "view", "secret-password")
	for _, p := range []string{"/quarantine/0000000000000001/thaw", "/quarantine/0000000000000001/delete", "/keys/alice/reset", "/keys/alice/suspend"} {
		resp, _ := post(t, viewer, f.ts.URL+p, url.Values{"csrf": {vcsrf}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("viewer POST %s: %s, want 403", p, resp.Status)
		}
	}
	if _, page := get(t, viewer, f.ts.URL+"/quarantine/0000000000000001"); strings.Contains(page, "confirm?op=thaw") {
		t.Errorf("the viewer is offered thaw")
	}
	for _, op := range []string{"thaw", "thaw-reset", "delete"} {
		if resp, page := get(t, viewer, f.ts.URL+"/quarantine/0000000000000001/confirm?op="+op); resp.StatusCode != http.StatusForbidden || strings.Contains(page, `id="confirm"`) {
			t.Errorf("viewer GET confirm?op=%s: %s, want 403 without the form", op, resp.Status)
		}
	}
	if _, page := get(t, viewer, f.ts.URL+"/events"); strings.Contains(page, "2006-01-02") || !regexp.MustCompile(`placeholder="20\d\d-\d\d-\d\d \d\d:00"`).MatchString(page) {
		t.Errorf("the events filter's until placeholder is not a real time:\n%s", page)
	}

	resp, _ := post(t, op, f.ts.URL+"/quarantine/0000000000000001/thaw", url.Values{"csrf": {csrf}, "reset": {"1"}})
	if resp.StatusCode != http.StatusSeeOther || len(f.q.thawed) != 1 || f.q.thawed[0].By != "op (console)" || !f.q.thawed[0].ResetRate {
		t.Errorf("operator thaw: %s, %+v", resp.Status, f.q.thawed)
	}
	resp, _ = post(t, op, f.ts.URL+"/keys/alice/reset", url.Values{"csrf": {csrf}})
	if resp.StatusCode != http.StatusSeeOther || len(f.rates.resets) != 1 {
		t.Errorf("operator reset: %s, %v", resp.Status, f.rates.resets)
	}
	evs, _ := f.events.Query(t.Context(), events.Query{Actions: []string{"reset"}})
	if len(evs) != 1 || evs[0].By != "op (console)" || evs[0].Key != "alice" {
		t.Errorf("reset event: %+v", evs)
	}
}

func TestFailedLoginsAreSlowed(t *testing.T) {
	f := newFixture(t, false)
	c := f.client(t)
	for i := range freeFailures {
		if resp, _ := f.login(t, c, "op", "wrong"); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("failure %d: %s, want 401", i+1, resp.Status)
		}
	}
	// The right password is not even checked while the user is slowed.
	if resp, _ := f.login(t, c, "op", "secret-password"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("after %d failures: %s, want 429", freeFailures, resp.Status)
	}
	f.now = f.now.Add(failureDelay + time.Second)
	if _, csrf := f.login(t, c, "op", "secret-password"); csrf == "" {
		t.Fatalf("after the delay the right password does not log in")
	}
	// Per client address: many names from one address.
	f.now = f.now.Add(failureWindow + time.Minute)
	for i := range freeFailures {
		f.login(t, c, "nobody"+strconv.Itoa(i), "x")
	}
	if resp, _ := f.login(t, c, "view", "secret-password"); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("address with %d failures: %s, want 429", freeFailures, resp.Status)
	}
}

func TestMessagePageShowsMarkupAsText(t *testing.T) {
	f := newFixture(t, false)
	const evil = `<script>alert(1)</script><img src=http://192.0.2.1/x.png>`
	f.q.entries["0000000000000002"] = quarantine.Entry{ID: "0000000000000002", State: quarantine.Frozen, Key: "alice",
		Sender: evil + "@example.org", Subject: evil, Recipients: []string{"bob@example.net"}}
	f.q.msgs["0000000000000002"] = []byte("From: x@example.org\r\nSubject: " + evil + "\r\nContent-Type: text/html\r\n\r\n<html><body><p>Hello</p>" + evil + "<img src=\"http://192.0.2.1/track.gif\"></body></html>\r\n")
	c := f.client(t)
	f.login(t, c, "op", "secret-password")
	for _, p := range []string{"/quarantine/0000000000000002", "/quarantine", "/quarantine/0000000000000002/confirm?op=delete"} {
		resp, page := get(t, c, f.ts.URL+p)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", p, resp.Status)
		}
		if strings.Contains(page, "<script") || strings.Contains(page, "<img src=http") || strings.Contains(page, "192.0.2.1/track") {
			t.Errorf("%s renders the message's markup:\n%s", p, page)
		}
		if !strings.Contains(page, "&lt;script&gt;") {
			t.Errorf("%s does not show the sender or subject as text", p)
		}
	}
}

func TestOverviewAndChart(t *testing.T) {
	f := newFixture(t, false)
	f.rates.rates = []policy.KeyRate{{Limit: "hourly", Key: "alice", Rate: 200, Max: 200, Period: time.Hour, Refusing: true, RetryAfter: 18 * time.Second}}
	for i := range 5 {
		f.events.Record(events.Event{Time: f.now.Add(time.Duration(i-10) * time.Minute), Key: "alice", Limit: "hourly", Action: "defer", Rate: 200, Max: 200})
	}
	f.events.Record(events.Event{Time: f.now.Add(-30 * time.Hour), Key: "alice", Limit: "hourly", Action: "defer", Rate: 200, Max: 200})
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	_, page := get(t, c, f.ts.URL+"/")
	if !regexp.MustCompile(`(?s)id="refused".*alice</a></td><td class="num count">5</td>`).MatchString(page) {
		t.Errorf("overview does not list alice with 5 refusals:\n%s", page)
	}
	if !regexp.MustCompile(`(?s)id="over".*alice.*refusing`).MatchString(page) {
		t.Errorf("overview does not list alice as refusing")
	}
	resp, err := c.Get(f.ts.URL + "/chart.png?key=alice")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	img, err := png.Decode(bytes.NewReader(b))
	if resp.Header.Get("Content-Type") != "image/png" || err != nil || img.Bounds().Dx() < 500 {
		t.Fatalf("chart: %s %v", resp.Header.Get("Content-Type"), err)
	}
	_, page = get(t, c, f.ts.URL+"/events?key=alice&since=24h")
	if n := strings.Count(page, `<td class="action">defer ×5</td>`); n != 1 {
		t.Errorf("events page lists %d rows of 5 defers in 24h, want 1:\n%s", n, page)
	}
}

func TestEventsPaging(t *testing.T) {
	f := newFixture(t, false)
	for i := range eventsPerPage + 20 {
		f.events.Record(events.Event{Time: f.now.Add(time.Duration(i-500) * time.Second), Key: fmt.Sprint("k", i), Action: "defer"})
	}
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	_, page := get(t, c, f.ts.URL+"/events")
	if n := strings.Count(page, `<td class="action">defer</td>`); n != eventsPerPage {
		t.Fatalf("first page: %d events", n)
	}
	m := regexp.MustCompile(`id="older" href="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no link to older events")
	}
	_, page = get(t, c, f.ts.URL+strings.ReplaceAll(m[1], "&amp;", "&"))
	if n := strings.Count(page, `<td class="action">defer</td>`); n != 20 {
		t.Fatalf("second page: %d events, want 20", n)
	}
}

// TestEventsPageShowsCoalescedCount: refusals of one key coalesced into
// one event show as one row with the count and the last time.
func TestEventsPageShowsCoalescedCount(t *testing.T) {
	f := newFixture(t, false)
	for i := range 7 {
		f.events.Record(events.Event{Time: f.now.Add(time.Duration(i-30) * time.Second), Key: "alice", Limit: "hourly", Action: "defer"})
	}
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	_, page := get(t, c, f.ts.URL+"/events")
	if n := strings.Count(page, `<td class="action">defer ×7</td>`); n != 1 || !strings.Contains(page, " to "+when(f.now.Add(-24*time.Second))+`">`) {
		t.Errorf("events page: %d rows of defer ×7, want 1 ending at %s:\n%s", n, when(f.now.Add(-24*time.Second)), page)
	}
}

func TestUsersFile(t *testing.T) {
	saved := hashCost
	hashCost.time, hashCost.memory = argonTime, argonMemory
	defer func() { hashCost = saved }()
	path := filepath.Join(t.TempDir(), "users")
	u, _ := LoadUsers(path)
	if err := u.Set("alice", Operator, []byte("correct horse")); err != nil {
		t.Fatal(err)
	}
	if err := u.Set("bad name", Viewer, []byte("correct horse")); err == nil {
		t.Error("a name with a space was accepted")
	}
	if err := u.Set("bob", Viewer, []byte("short")); err == nil {
		t.Error("a 5-character password was accepted")
	}
	if err := u.Save(path); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), "alice operator $argon2id$v=19$m=65536,t=3,p=2$") || strings.Contains(string(b), "correct horse") {
		t.Errorf("file:\n%s", b)
	}
	u2, err := LoadUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := u2.Verify("alice", []byte("correct horse")); !ok || x.Role != Operator {
		t.Error("the right password is refused")
	}
	if _, ok := u2.Verify("alice", []byte("correct horsE")); ok {
		t.Error("a wrong password is accepted")
	}
	if _, ok := u2.Verify("nobody", []byte("correct horse")); ok {
		t.Error("an unknown user is accepted")
	}
	x, _ := u2.Lookup("alice")
	for _, shown := range []string{fmt.Sprint(x), fmt.Sprintf("%+v %#v", x, x)} {
		if strings.Contains(shown, "argon2") {
			t.Errorf("a printed User shows its hash: %s", shown)
		}
	}
	if !u2.Remove("alice") || u2.Remove("alice") {
		t.Error("Remove")
	}
	os.WriteFile(path, []byte("eve operator $argon2id$v=19$m=4194304,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA\n"), 0o600)
	if _, err := LoadUsers(path); err == nil {
		t.Error("a hash asking for 4 GiB of memory was accepted")
	}
}

// TestSecureCookieBehindProxy: a reverse proxy on this host that says the
// browser spoke HTTPS (X-Forwarded-Proto) gets Secure cookies; the same
// header from another host is not believed.
func TestSecureCookieBehindProxy(t *testing.T) {
	f := newFixture(t, false)
	for _, trusted := range []bool{false, true} {
		if trusted {
			f.srv.opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
		}
		for _, tc := range []struct {
			remote string
			secure bool
		}{{"127.0.0.1:40000", trusted}, {"[::1]:40000", trusted}, {"192.0.2.1:40000", false}} {
			req := httptest.NewRequest("GET", "/login", nil)
			req.RemoteAddr = tc.remote
			req.Header.Set("X-Forwarded-Proto", "https")
			rec := httptest.NewRecorder()
			f.srv.Handler().ServeHTTP(rec, req)
			cs := rec.Result().Cookies()
			if len(cs) != 1 || cs[0].Secure != tc.secure {
				t.Errorf("trusted_proxies %v, from %s: cookies %v, want Secure=%v", trusted, tc.remote, cs, tc.secure)
			}
		}
	}
}

// TestForwardedProtoNeedsTrustedProxy: from a peer not in
// trusted_proxies (a local user on loopback) X-Forwarded-Proto https does
// not make the expected Origin scheme https.
func TestForwardedProtoNeedsTrustedProxy(t *testing.T) {
	f := newFixture(t, false)
	c := f.client(t)
	_, csrf := f.login(t, c, "op", "secret-password")
	host := f.ts.Listener.Addr().String()
	for _, trusted := range []bool{false, true} {
		if trusted {
			f.srv.opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		}
		for origin, ok := range map[string]bool{"https://" + host: trusted, "http://" + host: !trusted} {
			req, _ := http.NewRequest("POST", f.ts.URL+"/keys/alice/reset", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", origin)
			req.Header.Set("X-Forwarded-Proto", "https")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := resp.StatusCode == http.StatusSeeOther; got != ok {
				t.Errorf("trusted_proxies %v, Origin %s with X-Forwarded-Proto https: %s", trusted, origin, resp.Status)
			}
		}
	}
}

// TestRemovedUserIsLoggedOut: `web user add|remove` rewrite the users
// file; the console notices at the next request, which ends a removed or
// demoted user's session.
func TestRemovedUserIsLoggedOut(t *testing.T) {
	f := newFixture(t, false)
	op, view := f.client(t), f.client(t)
	_, csrf := f.login(t, op, "op", "secret-password")
	f.login(t, view, "view", "secret-password")
	u, err := LoadUsers(f.srv.opts.UsersFile)
	if err != nil {
		t.Fatal(err)
	}
	u.Remove("view")
	if err := u.Set("op", Viewer, []byte("secret-password")); err != nil {
		t.Fatal(err)
	}
	if err := u.Save(f.srv.opts.UsersFile); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, view, f.ts.URL+"/"); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("removed user: %s, want 303 to /login", resp.Status)
	}
	if resp, _ := post(t, op, f.ts.URL+"/keys/alice/reset", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("demoted operator's reset: %s, want 403", resp.Status)
	}
}

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

var deferRow = regexp.MustCompile(`<td class="action">defer(?: ×(\d+))?</td>`)

// defers is the number of defers the event rows of page stand for.
func defers(page string) (n int) {
	for _, m := range deferRow.FindAllStringSubmatch(page, -1) {
		c, err := strconv.Atoi(m[1])
		if err != nil {
			c = 1
		}
		n += c
	}
	return n
}
