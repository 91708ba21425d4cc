package web

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestSessionEndsWhenCredentialsChange: a new password, or removing and
// re-adding a user, ends the user's sessions at their next request.
func TestSessionEndsWhenCredentialsChange(t *testing.T) {
	f := newFixture(t, false)
	op, view := f.client(t), f.client(t)
	f.login(t, op, "op", "secret-password")
	f.login(t, view, "view", "secret-password")
	u, err := LoadUsers(f.srv.opts.UsersFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Set("op", Operator, []byte("new-password")); err != nil {
		t.Fatal(err)
	}
	u.Remove("view")
	if err := u.Save(f.srv.opts.UsersFile); err != nil {
		t.Fatal(err)
	}
	if err := u.Set("view", Viewer, []byte("secret-password")); err != nil {
		t.Fatal(err)
	}
	if err := u.Save(f.srv.opts.UsersFile); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*http.Client{"op (new password)": op, "view (removed, re-added)": view} {
		if resp, _ := get(t, c, f.ts.URL+"/"); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s: old session got %s, want 303 to /login", name, resp.Status)
		}
	}
	if _, csrf := f.login(t, view, "view", "secret-password"); csrf == "" {
		t.Error("re-added user cannot log in")
	}
}

// TestParallelLoginsAreThrottled: of parallel wrong attempts for one user
// at most freeFailures are checked, the rest are 429; a right password
// among them may log in only if it is checked within that allowance.
func TestParallelLoginsAreThrottled(t *testing.T) {
	for _, n := range []int{16, 12} {
		f := newFixture(t, false)
		forms := make([]url.Values, n)
		clients := make([]*http.Client, n)
		for i := range n {
			clients[i] = f.client(t)
			_, page := get(t, clients[i], f.ts.URL+"/login")
			forms[i] = url.Values{"csrf": {csrfOf(t, page)}, "username": {"op"}, "password": {"wrong"}}
		}
		if n == 12 {
			forms[n-1].Set("password", "secret-password")
		}
		codes := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp, err := clients[i].PostForm(f.ts.URL+"/login", forms[i])
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				codes[i] = resp.StatusCode
			})
		}
		wg.Wait()
		wrong := 0
		for _, c := range codes {
			if c == http.StatusUnauthorized {
				wrong++
			}
		}
		if wrong > freeFailures {
			t.Errorf("%d parallel logins: %d wrong ones checked (%v), want at most %d", n, wrong, codes, freeFailures)
		}
	}
}

// loginFrom posts a wrong password for name from remote with an
// X-Forwarded-For header, straight to the handler.
func loginFrom(t *testing.T, h http.Handler, remote, xff, name string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/login", nil))
	page, cookies := rec.Body.String(), rec.Result().Cookies()
	form := url.Values{"csrf": {csrfOf(t, page)}, "username": {name}, "password": {"wrong"}}
	req := httptest.NewRequest("POST", "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remote
	req.Header.Set("X-Forwarded-For", xff)
	for _, c := range cookies {
		req.AddCookie(c)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code
}

// TestForwardedForNeedsTrustedProxy: rotating X-Forwarded-For does not
// dodge the per-address throttle unless the peer is a trusted proxy.
func TestForwardedForNeedsTrustedProxy(t *testing.T) {
	f := newFixture(t, false)
	h := f.srv.Handler()
	try := func(i int) int {
		return loginFrom(t, h, "127.0.0.1:40000", "198.51.100."+string(rune('1'+i)), "nobody"+string(rune('a'+i)))
	}
	for i := range freeFailures {
		try(i)
	}
	if code := try(freeFailures); code != http.StatusTooManyRequests {
		t.Errorf("untrusted peer rotating X-Forwarded-For: %d, want 429", code)
	}
	f.srv.opts.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if code := loginFrom(t, h, "127.0.0.1:40000", "203.0.113.9, 127.0.0.2", "someone"); code != http.StatusUnauthorized {
		t.Errorf("trusted proxy, new client: %d, want 401", code)
	}
}

func TestNextStaysOnSite(t *testing.T) {
	for _, n := range []string{`/\t/127.0.0.1:18099/`, "/\t/127.0.0.1:18099/", `/./\127.0.0.1:18099/`, "//127.0.0.1/", "http://x/", "/\n/x", ""} {
		if got := safeNext(n); got != "/" {
			t.Errorf("safeNext(%q) = %q, want /", n, got)
		}
	}
	if got := safeNext("/keys/a?x=1"); got != "/keys/a?x=1" {
		t.Errorf("safeNext kept %q", got)
	}
}

// TestUsersFileDoesNotEchoFields: a line with swapped fields is refused
// without quoting the hash.
func TestUsersFileDoesNotEchoFields(t *testing.T) {
	h, err := hashPassword([]byte("secret-password"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "users")
	for _, line := range []string{"op " + h + " operator", h + " operator op", "op operator " + h + "x$"} {
		if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadUsers(path)
		if err == nil || strings.Contains(err.Error(), strings.Split(h, "$")[4]) {
			t.Errorf("line %q: error %v", line, err)
		}
	}
}

// TestBadQueryValues: the banner shows only known texts; a bad paging
// value is 400.
func TestBadQueryValues(t *testing.T) {
	f := newFixture(t, false)
	c := f.client(t)
	f.login(t, c, "op", "secret-password")
	if _, page := get(t, c, f.ts.URL+"/keys/alice?done="+url.QueryEscape("hacked, call 555")); strings.Contains(page, "555") {
		t.Error("done= text echoed into the banner")
	}
	if _, page := get(t, c, f.ts.URL+"/quarantine?done="+url.QueryEscape("thaw 0123456789abcdef")); !strings.Contains(page, "Done: thaw 0123456789abcdef") {
		t.Error("thaw banner missing")
	}
	if resp, _ := get(t, c, f.ts.URL+"/events?before=zz"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("/events?before=zz: %s, want 400", resp.Status)
	}
}

// TestOriginSchemeChecked: an Origin with the right host but another
// scheme is cross-origin.
func TestOriginSchemeChecked(t *testing.T) {
	f := newFixture(t, false)
	c := f.client(t)
	_, csrf := f.login(t, c, "op", "secret-password")
	for origin, want := range map[string]int{"https://" + f.ts.Listener.Addr().String(): http.StatusForbidden, f.ts.URL: http.StatusSeeOther} {
		req, _ := http.NewRequest("POST", f.ts.URL+"/keys/alice/reset", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Origin %s: %s, want %d", origin, resp.Status, want)
		}
	}
}
