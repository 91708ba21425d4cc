package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
)

func testScope(t *testing.T, domains ...string) Scope {
	t.Helper()
	ds, err := ParseDomains(domains)
	if err != nil {
		t.Fatal(err)
	}
	return newScope(ds, testLimits)
}

// TestScopeAllowsSenderOrLogin: a message is in a domain operator's scope
// by its sender's or its SASL login's domain, in any case and IDNA form;
// a subdomain is not included unless listed; a login without "@" has no
// domain.
func TestScopeAllowsSenderOrLogin(t *testing.T) {
	sc := testScope(t, "Example.ORG", "bücher.example")
	for _, c := range []struct {
		sender, login string
		want          bool
	}{
		{"alice@example.org", "", true},
		{"<ALICE+news@EXAMPLE.org>", "", true},
		{"bob@example.net", "alice@example.org", true},
		{"bob@example.net", "", false},
		{"bob@example.net", "alice", false},
		{"alice@mail.example.org", "", false},
		{"alice@example.org.evil.example", "", false},
		{"a@BÜCHER.example", "", true},
		{"a@xn--bcher-kva.example", "", true},
		{"", "", false},
		{"<>", "example.org", false},
	} {
		if got := sc.Allows(c.sender, c.login); got != c.want {
			t.Errorf("Allows(%q, %q) = %v, want %v", c.sender, c.login, got, c.want)
		}
	}
	if sub := testScope(t, "example.org", "mail.example.org"); !sub.Allows("alice@mail.example.org", "") {
		t.Error("a listed subdomain is not in scope")
	}
	if !(Scope{}).Allows("bob@example.net", "") || !(Scope{}).SiteWide() {
		t.Error("the zero Scope is not site-wide")
	}
}

// TestScopeAllowsKeyByKind: a key is decided by its limit's key
// attributes: an address of a SASL login or sender, or a sender domain;
// a client address or a recipient is in no domain; an unknown limit hides
// the key; limit "" means any configured limit.
func TestScopeAllowsKeyByKind(t *testing.T) {
	sc := testScope(t, "example.org")
	for _, c := range []struct {
		limit, key string
		want       bool
	}{
		{"per-user", "alice@example.org", true},
		{"per-user", "bob@example.net", false},
		{"per-user", "alice", false},
		{"per-sender", "alice@example.org", true},
		{"per-domain", "example.org", true},
		{"per-domain", "mail.example.org", false},
		{"per-client", "192.0.2.1", false},
		{"per-client", "alice@example.org", false},
		{"user-client", "192.0.2.1|alice@example.org", true},
		{"user-client", "192.0.2.1|bob@example.net", false},
		{"user-client", "alice@example.org", false},
		{"per-rcpt", "alice@example.org", false},
		{"gone", "alice@example.org", false},
		{"", "alice@example.org", true},
		{"", "192.0.2.1", false},
		{"", "bob@example.net", false},
	} {
		if got := sc.AllowsKey(c.limit, c.key); got != c.want {
			t.Errorf("AllowsKey(%q, %q) = %v, want %v", c.limit, c.key, got, c.want)
		}
	}
	if !(Scope{}).AllowsKey("per-client", "192.0.2.1") {
		t.Error("a site-wide scope hides a client key")
	}
}

// TestScopeAllowsEvent: an event is in scope by its key, or as a single
// decision by its sender; a count of coalesced decisions of a key outside
// the scope is not (they span senders), nor an event without a key.
func TestScopeAllowsEvent(t *testing.T) {
	sc := testScope(t, "example.org")
	for _, c := range []struct {
		e    events.Event
		want bool
	}{
		{events.Event{Key: "alice@example.org", Limit: "per-user", Count: 9}, true},
		{events.Event{Key: "alice@example.org", Action: events.Reset}, true},
		{events.Event{Key: "192.0.2.1", Limit: "per-client", Count: 1, Sender: "alice@example.org"}, true},
		{events.Event{Key: "192.0.2.1", Limit: "per-client", Count: 4, Sender: "alice@example.org"}, false},
		{events.Event{Key: "bob@example.net", Limit: "per-user", Count: 1, Sender: "bob@example.net"}, false},
		{events.Event{Action: events.Reload, Count: 1}, false},
	} {
		if got := sc.allowsEvent(c.e); got != c.want {
			t.Errorf("allowsEvent(%+v) = %v, want %v", c.e, got, c.want)
		}
	}
}

// TestParseDomains: canonical (lower case, no trailing dot, IDNA
// A-labels), sorted, no repeats; "@example.org", spaces, empty labels
// and non-domains are refused.
func TestParseDomains(t *testing.T) {
	got, err := ParseDomains([]string{"Example.ORG.", "bücher.example", "example.org"})
	if err != nil || strings.Join(got, ",") != "example.org,xn--bcher-kva.example" {
		t.Fatalf("ParseDomains = %q, %v", got, err)
	}
	for _, bad := range []string{"@example.org", "a b", "example..org", "", "-x.example", "x_y.example", strings.Repeat("a", 64) + ".example"} {
		if _, err := ParseDomains([]string{bad}); err == nil {
			t.Errorf("ParseDomains(%q) accepted", bad)
		}
	}
}

// TestDomainOperatorSeesOnlyTheirDomain: over HTTP, a domain operator of
// example.org sees alice@example.org's key, messages and events; bob's
// key page, chart, message, confirmation page and actions and the client
// key are 404 (nothing happens); the overview's rows and counts and the
// events and quarantine pages leave example.net and the client key out.
// A site-wide operator sees all of it.
func TestDomainOperatorSeesOnlyTheirDomain(t *testing.T) {
	f := domainFixture(t)
	dom, op := f.client(t), f.client(t)
	_, csrf := f.login(t, dom, "dom", "secret-password")
	f.login(t, op, "op", "secret-password")
	for _, p := range []string{"/keys/alice@example.org", "/chart.png?key=alice@example.org", "/quarantine/00000000000000a1", "/quarantine/00000000000000a2",
		"/quarantine/00000000000000a1/confirm?op=thaw"} {
		if resp, _ := get(t, dom, f.ts.URL+p); resp.StatusCode != http.StatusOK {
			t.Errorf("domain operator: GET %s: %s, want 200", p, resp.Status)
		}
	}
	hidden := []string{"/keys/bob@example.net", "/chart.png?key=bob@example.net", "/keys/192.0.2.1", "/chart.png?key=192.0.2.1",
		"/quarantine/00000000000000b1", "/quarantine/00000000000000b1/confirm?op=thaw"}
	for _, p := range hidden {
		if resp, body := get(t, dom, f.ts.URL+p); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "per-") {
			t.Errorf("domain operator: GET %s: %s, want 404 showing nothing of it:\n%s", p, resp.Status, body)
		}
		if resp, _ := get(t, op, f.ts.URL+p); resp.StatusCode != http.StatusOK {
			t.Errorf("site-wide operator: GET %s: %s, want 200", p, resp.Status)
		}
	}
	for _, p := range []string{"/keys/bob@example.net/reset", "/quarantine/00000000000000b1/thaw", "/quarantine/00000000000000b1/delete"} {
		if resp, _ := post(t, dom, f.ts.URL+p, url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusNotFound {
			t.Errorf("domain operator: POST %s: %s, want 404", p, resp.Status)
		}
	}
	if len(f.rates.resets)+len(f.q.thawed)+len(f.q.deleted) != 0 {
		t.Fatalf("a hidden key or message was acted on: %v %v %v", f.rates.resets, f.q.thawed, f.q.deleted)
	}
	if resp, _ := post(t, dom, f.ts.URL+"/quarantine/00000000000000a1/thaw", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther || len(f.q.thawed) != 1 {
		t.Fatalf("domain operator's thaw of alice's message: %s, %d thawed", resp.Status, len(f.q.thawed))
	}

	_, page := get(t, dom, f.ts.URL+"/")
	for _, want := range []string{"alice@example.org", `<a href="/quarantine?state=held">1</a>`, `<a href="/quarantine?state=frozen">1</a>`, "dom (operator of example.org)"} {
		if !strings.Contains(page, want) {
			t.Errorf("domain operator's overview lacks %q:\n%s", want, page)
		}
	}
	for _, p := range []string{"/", "/events"} {
		_, page := get(t, dom, f.ts.URL+p)
		if strings.Contains(page, "example.net") || strings.Contains(page, "192.0.2.1") || strings.Contains(page, "00000000000000b1") {
			t.Errorf("domain operator's %s shows another domain's mail:\n%s", p, page)
		}
	}
	for _, p := range []string{"/events?key=bob@example.net", "/events?key=192.0.2.1"} {
		if _, page := get(t, dom, f.ts.URL+p); defers(page) > 0 {
			t.Errorf("domain operator's %s lists events:\n%s", p, page)
		}
		if _, page := get(t, op, f.ts.URL+p); defers(page) != 3 {
			t.Errorf("site-wide %s: want 3 defers:\n%s", p, page)
		}
	}
	if _, page := get(t, dom, f.ts.URL+"/events"); defers(page) != 3 {
		t.Errorf("domain operator's events page: want alice's 3 defers:\n%s", page)
	}
	if _, page := get(t, dom, f.ts.URL+"/quarantine"); !strings.Contains(page, "00000000000000a1") || !strings.Contains(page, "00000000000000a2") ||
		strings.Contains(page, "00000000000000b1") || strings.Contains(page, "example.net") {
		t.Errorf("domain operator's quarantine page: want alice's messages, not bob's:\n%s", page)
	}
	_, page = get(t, op, f.ts.URL+"/")
	for _, want := range []string{"alice@example.org", "bob@example.net", "192.0.2.1", "kept past max_age"} {
		if !strings.Contains(page, want) {
			t.Errorf("site-wide overview lacks %q", want)
		}
	}
	if _, page := get(t, op, f.ts.URL+"/events"); defers(page) != 9 {
		t.Errorf("site-wide events page: want 9 defers:\n%s", page)
	}
}

// TestSessionEndsWhenDomainsChange: a user's sessions end when their
// domains change, the password (hash) being the same.
func TestSessionEndsWhenDomainsChange(t *testing.T) {
	f := domainFixture(t)
	dom := f.client(t)
	f.login(t, dom, "dom", "secret-password")
	u, err := LoadUsers(f.srv.opts.UsersFile)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := u.Lookup("dom")
	x.Domains = []string{"example.net", "example.org"}
	u.byName["dom"] = x
	if err := u.Save(f.srv.opts.UsersFile); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, dom, f.ts.URL+"/"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("after a change of domains the old session got %s, want 303 to /login", resp.Status)
	}
	if _, csrf := f.login(t, dom, "dom", "secret-password"); csrf == "" {
		t.Fatal("cannot log in again")
	}
	if _, page := get(t, dom, f.ts.URL+"/"); !strings.Contains(page, "bob@example.net") {
		t.Error("the new session does not see the added domain")
	}
}

// TestDomainOperatorResetsOnlyTheirLimits: a domain operator's reset of
// a key forgets its rate under the limits of their scope only, never
// under one that counts the key as a recipient; naming such a limit is 404.
func TestDomainOperatorResetsOnlyTheirLimits(t *testing.T) {
	f := domainFixture(t)
	f.rates.rates = append(f.rates.rates, policy.KeyRate{Limit: "per-rcpt", Key: "alice@example.org", Rate: 1, Max: 10})
	dom := f.client(t)
	_, csrf := f.login(t, dom, "dom", "secret-password")
	if resp, _ := post(t, dom, f.ts.URL+"/keys/alice@example.org/reset", url.Values{"csrf": {csrf}, "limit": {"per-rcpt"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("reset under per-rcpt: %s, want 404", resp.Status)
	}
	if resp, _ := post(t, dom, f.ts.URL+"/keys/alice@example.org/reset", url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("reset: %s", resp.Status)
	}
	if got := strings.Join(f.rates.resets, " "); got != "alice@example.org/per-user" {
		t.Fatalf("resets %q, want alice@example.org/per-user only", got)
	}
}

// TestDomainOperatorBulkSelectsOnlyTheirMail: a domain operator's bulk
// confirmation selects from their messages only (a filter for another
// domain matches nothing), and a bulk post of another domain's ID acts on
// none of it, as for a message that is gone.
func TestDomainOperatorBulkSelectsOnlyTheirMail(t *testing.T) {
	f := domainFixture(t)
	dom := f.client(t)
	_, csrf := f.login(t, dom, "dom", "secret-password")
	if resp, page := get(t, dom, f.ts.URL+"/quarantine/bulk?op=thaw&sender=bob@example.net"); resp.StatusCode != http.StatusBadRequest || strings.Contains(page, "00000000000000b1") {
		t.Errorf("bulk confirmation for bob's mail: %s, want 400 naming none of it", resp.Status)
	}
	if resp, page := get(t, dom, f.ts.URL+"/quarantine/bulk?op=delete&since=24h"); resp.StatusCode != http.StatusOK ||
		!strings.Contains(page, "00000000000000a1") || strings.Contains(page, "00000000000000b1") {
		t.Errorf("bulk confirmation of the last day: %s, want alice's messages, not bob's:\n%s", resp.Status, page)
	}
	post(t, dom, f.ts.URL+"/quarantine/bulk/delete", url.Values{"csrf": {csrf}, "id": {"00000000000000b1", "00000000000000a1"}})
	if len(f.q.deleted) != 1 || strings.Join(f.q.deleted[0].IDs, ",") != "00000000000000a1" {
		t.Fatalf("bulk delete acted on %+v, want alice's message only", f.q.deleted)
	}
}
