//go:build integration

package main

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestConsoleBrowserDomainOperator: a strict hold limit of 1 per hour per
// SASL login on a real Postfix delivers the first message of
// alice@example.org and of bob@example.net and holds the next 2 of each.
// In chromium a domain operator of example.org (web user add --domain)
// sees alice's key, refusals and messages on the overview, whose held
// count leaves bob's out; bob's key page, chart and message are 404 and
// the events of his key list nothing; the operator thaws one of alice's
// messages (delivered once). A site-wide operator sees both. With
// RATELIMITD_SCREENSHOTS set, the domain operator's overview is saved
// there as domain-overview.png.
func TestConsoleBrowserDomainOperator(t *testing.T) {
	dir := t.TempDir()
	cfgPath, pf, sink := postfixOneHold(t, dir, webConfig(t, dir))
	pw := consoleUsers(t, cfgPath)
	if code, out, errs := runCLI(t, pw+"\n", "--config", cfgPath, "web", "user", "add", "dora", "--role", "operator",
		"--domain", "Example.ORG", "--password-stdin"); code != 0 {
		t.Fatalf("web user add dora: %d %s %s", code, out, errs)
	}
	td := startTestDaemon(t, cfgPath)
	base := "http://" + td.d.WebAddr() + "/"

	for _, from := range []string{"alice@example.org", "bob@example.net"} {
		for i := 1; i <= 3; i++ {
			if err := mtatest.Send(t, pf.Addr(), mtatest.Mail{Login: from, ClientAddr: "192.0.2.7", From: from, To: []string{"rcpt@example.com"},
				Data: mtatest.BuildMessage(from, "rcpt@example.com", fmt.Sprintf("%s part %d", from, i), "Hello.\n")}); err != nil {
				t.Fatalf("%s message %d: %v", from, i, err)
			}
		}
	}
	sink.WaitCount(t, 2, 30*time.Second)
	pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == 4 })
	entries := heldEntries(t, td, 4)
	ids := map[string][]string{}
	for _, e := range entries {
		ids[e.Sender] = append(ids[e.Sender], e.ID)
	}
	if len(ids["alice@example.org"]) != 2 || len(ids["bob@example.net"]) != 2 {
		t.Fatalf("held entries: %+v", entries)
	}
	alice, bob := ids["alice@example.org"], ids["bob@example.net"]

	b := newBrowser(t, base)
	b.login("dora", pw)
	if who := b.text("header .who"); !strings.Contains(who, "operator of example.org") {
		t.Errorf("header: %q", who)
	}
	b.open("/")
	page := b.text("main")
	if !strings.Contains(b.text("#refused"), "alice@example.org") || !strings.Contains(b.text("#over"), "alice@example.org") ||
		strings.Contains(page, "example.net") {
		t.Fatalf("domain operator's overview: want alice, not bob:\n%s", page)
	}
	if q := b.text("#quarantine"); !strings.Contains(q, "held\t2") || strings.Contains(q, "failed operations") {
		t.Errorf("domain operator's quarantine counts:\n%q", q)
	}
	if d := os.Getenv("RATELIMITD_SCREENSHOTS"); d != "" {
		b.screenshot(d, "domain-overview")
	}
	b.open("/keys/alice@example.org")
	if lim := b.text("#limits"); !strings.Contains(lim, "onehold") {
		t.Fatalf("alice's key page:\n%s", lim)
	}
	b.open("/quarantine")
	if n, txt := b.count("#entries tr")-1, b.text("#entries"); n != 2 || strings.Contains(txt, "example.net") {
		t.Fatalf("domain operator's quarantine lists %d:\n%s", n, txt)
	}
	for _, p := range []string{"/keys/bob@example.net", "/chart.png?key=bob@example.net", "/quarantine/" + bob[0], "/quarantine/" + bob[0] + "/confirm?op=thaw"} {
		b.open(p)
		if st := b.status("GET", b.origin+p); st != http.StatusNotFound {
			t.Errorf("domain operator: %s answered %d, want 404", p, st)
		}
	}
	b.open("/events?key=bob@example.net")
	if n := b.count("table.events tr"); n > 1 {
		t.Errorf("domain operator: the events of bob's key list %d rows:\n%s", n-1, b.text("main"))
	}
	b.open("/events?key=alice@example.org")
	if n := b.count("table.events tr"); n < 2 {
		t.Errorf("domain operator: no events of alice's key:\n%s", b.text("main"))
	}

	b.open("/quarantine/" + alice[0] + "/confirm?op=thaw")
	b.submit("#confirm")
	if !strings.Contains(b.text("main"), "Done: thaw "+alice[0]) {
		t.Fatalf("domain operator's thaw: %s\n%s", b.location(), b.text("main"))
	}
	sink.WaitCount(t, 3, 30*time.Second)
	time.Sleep(time.Second)
	if n := sink.Count(); n != 3 {
		t.Fatalf("after the thaw the sink has %d messages, want 3", n)
	}

	o := b.tab()
	o.login("op", pw)
	o.open("/")
	if r := o.text("#refused"); !strings.Contains(r, "alice@example.org") || !strings.Contains(r, "bob@example.net") {
		t.Errorf("site-wide overview: want alice and bob refused:\n%s", r)
	}
	if q := o.text("#quarantine"); !strings.Contains(q, "held\t3") {
		t.Errorf("site-wide quarantine counts:\n%q", q)
	}
	o.open("/keys/bob@example.net")
	if st := o.status("GET", o.origin+"/keys/bob@example.net"); st != http.StatusOK {
		t.Errorf("site-wide operator: bob's key page answered %d", st)
	}
	for _, br := range []*browser{b, o} {
		if out := br.outside(); len(out) > 0 {
			t.Fatalf("the browser requested outside the console: %v", out)
		}
	}
}

// postfixOneHold starts an SMTP sink and a private Postfix whose policy
// service is a daemon to be configured with extra, Postfix's hold commands
// and mtatest.OneHoldLimit; it returns the configuration's path.
func postfixOneHold(t *testing.T, dir, extra string) (string, *mtatest.Postfix, *mtatest.Sink) {
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: fmt.Sprintf("inet:127.0.0.1:%d", port)})
	return writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), extra+"\n[quarantine]\n"+pf.HoldCommands()+mtatest.OneHoldLimit), pf, sink
}

// heldEntries waits up to 20 s for n pending entries in td's quarantine,
// each with its queue ID, and returns the entries it found.
func heldEntries(t *testing.T, td *testDaemon, n int) []quarantine.Entry {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
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
