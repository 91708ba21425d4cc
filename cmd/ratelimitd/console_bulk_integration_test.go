//go:build integration

package main

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestConsoleBrowserBulkThaw: a real Postfix with the milter freezes
// alice's mail past 2 an hour; of 42 messages 40 are frozen. In chromium
// the operator filters the quarantine by her key and thaws all that
// match with one confirmation (count and first 5 shown): each of the 42
// reaches the sink exactly once (by Message-ID), the events page shows
// each thaw's new queue ID (the entry's thawed_as), and each is the
// queue ID Postfix logged for that Message-ID. Then 3 more are frozen; checked and thawed with a
// rate reset, her rate is reset once and her next message is delivered.
// A viewer's bulk confirmation is 403. Screenshots of the quarantine
// with the bulk selection, of the confirmation and of the result are
// saved.
func TestConsoleBrowserBulkThaw(t *testing.T) {
	dir := t.TempDir()
	port, mport := freePort(t), freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(),
		Milter: fmt.Sprintf("inet:127.0.0.1:%d", mport), ReinjectPort: true})
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), webConfig(t, dir)+fmt.Sprintf(`
[milter]
listen = "127.0.0.1:%d"

[quarantine]
reinject_addr = %q
`, mport, pf.ReinjectAddr)+limitTable(`name = "twofreeze"`, `key = ["sasl_username"]`, `limit = 2`, `period = "1h"`,
		`mode = "strict"`, `action = "freeze"`, `via = ["milter"]`))
	pw := consoleUsers(t, cfgPath)
	td := startTestDaemon(t, cfgPath)

	send := func(from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", i)); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
		}
	}
	frozen := func(n int) []quarantine.Entry {
		t.Helper()
		var es []quarantine.Entry
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			var err error
			if es, err = td.d.Quarantine().List(quarantine.Filter{States: []quarantine.State{quarantine.Frozen}}); err != nil || len(es) == n {
				break
			}
		}
		if len(es) != n {
			t.Fatalf("%d frozen, want %d", len(es), n)
		}
		return es
	}
	send(1, 42)
	sink.WaitCount(t, 2, 30*time.Second)
	frozen(40)

	b := newBrowser(t, "http://"+td.d.WebAddr()+"/")
	b.login("op", pw)
	shots := screenshotDir(t)
	b.open("/quarantine?key=alice")
	if n := b.count(`#entries input[type="checkbox"]`); n != 40 {
		t.Fatalf("the quarantine page has %d checkboxes, want 40", n)
	}
	b.submit("#all-thaw")
	if h := b.text("h1"); h != "Thaw 40 messages?" {
		t.Fatalf("confirmation: %q\n%s", h, b.text("main"))
	}
	if n, more := b.count("#first tr")-1, b.text("#more"); n != 5 || more != "and 35 more." {
		t.Fatalf("confirmation names %d messages, then %q", n, more)
	}
	b.screenshot(shots, "bulk-confirm")
	b.submit("#confirm")
	if h := b.text("h1"); h != "40 thawed, 0 failed" {
		t.Fatalf("after the bulk thaw: %q\n%s", h, b.text("main"))
	}
	b.screenshot(shots, "bulk-done")
	sink.WaitCount(t, 42, 60*time.Second)
	time.Sleep(time.Second) // nothing more may arrive
	thawedIDs := map[string]bool{}
	seen := map[string]int{}
	for _, m := range sink.Messages() {
		id := m.Header("Message-Id")
		if seen[id]++; m.Header("X-Ratelimitd-Thawed") != "" {
			thawedIDs[id] = true
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if len(seen) != 42 || len(thawedIDs) != 40 || sink.Count() != 42 {
		t.Fatalf("sink: %d messages, %d distinct, %d thawed; want 42, 42, 40", sink.Count(), len(seen), len(thawedIDs))
	}

	// Each thaw's event names the queue ID Postfix's re-injection
	// listener answered, which Postfix logged with that message's ID.
	evs, err := td.d.Events().Query(context.Background(), eventsQuery("thaw"))
	if err != nil || len(evs) != 40 {
		t.Fatalf("thaw events: %d %v", len(evs), err)
	}
	b.open("/events?key=alice&action=thaw")
	page := b.text("table.events")
	thawed, err := td.d.Quarantine().List(quarantine.Filter{States: []quarantine.State{quarantine.Thawed}})
	if err != nil || len(thawed) != 40 {
		t.Fatalf("thawed entries: %d %v", len(thawed), err)
	}
	thawedAs := map[string]bool{}
	for _, e := range thawed {
		thawedAs[e.ThawedAs] = true
	}
	queuedAs := regexp.MustCompile(`queued as ([0-9A-Za-z]+)`)
	logged := map[string]bool{}
	for _, ev := range evs {
		m := queuedAs.FindStringSubmatch(ev.Detail)
		if m == nil || ev.By != "op (console)" || !thawedAs[m[1]] {
			t.Fatalf("thaw event %+v: no new queue ID, not by the operator, or not the entry's thawed_as", ev)
		}
		if !strings.Contains(page, "queued as "+m[1]) {
			t.Errorf("the events page does not show queue ID %s", m[1])
		}
		lm := regexp.MustCompile(`(?m)\b` + m[1] + `: message-id=(<[^>]+>)`).FindStringSubmatch(pf.Log())
		if lm == nil || !thawedIDs[lm[1]] || logged[lm[1]] {
			t.Fatalf("queue ID %s: Postfix logged %v, want one thawed message's ID", m[1], lm)
		}
		logged[lm[1]] = true
	}

	// Three more are frozen (her rate is still over); checked and thawed
	// with a rate reset.
	send(43, 45)
	var ids []string
	for _, e := range frozen(3) {
		ids = append(ids, e.ID)
	}
	b.open("/quarantine?key=alice")
	for _, id := range ids {
		b.do("check "+id, chromedp.Click(`#entries input[value="`+id+`"]`))
	}
	b.screenshot(shots, "quarantine-bulk")
	b.submit("#sel-thaw-reset")
	if h := b.text("h1"); h != "Thaw and reset the rate of 3 messages?" {
		t.Fatalf("confirmation of the checked: %q\n%s", h, b.text("main"))
	}
	b.submit("#confirm")
	if h := b.text("h1"); h != "3 thawed, 0 failed" {
		t.Fatalf("after thaw and reset: %q\n%s", h, b.text("main"))
	}
	sink.WaitCount(t, 45, 60*time.Second)
	if n := strings.Count(td.logs.String(), `msg="rate reset" key=alice`); n != 1 {
		t.Fatalf("alice's rate was reset %d times, want once:\n%s", n, td.logs.String())
	}
	send(46, 46)
	sink.WaitCount(t, 46, 30*time.Second)

	v := b.tab()
	v.login("view", pw)
	v.open("/quarantine/bulk?op=thaw&key=alice")
	if st := v.status("GET", v.origin+"/quarantine/bulk?op=thaw&key=alice"); st != http.StatusForbidden || v.count("form#confirm, button#confirm") != 0 {
		t.Fatalf("viewer's bulk confirmation: status %d", st)
	}
	for _, br := range []*browser{b, v} {
		if out := br.outside(); len(out) > 0 {
			t.Fatalf("the browser requested outside the console: %v", out)
		}
	}
}
