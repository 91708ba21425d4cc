package web

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/mailout"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// bulkEnv is a console over a real quarantine life cycle (a BoltDB file)
// that re-injects into a real SMTP sink.
type bulkEnv struct {
	*fixture
	svc   *lifecycle.Service
	store *quarantine.Store
	sink  *mtatest.Sink
	n     int // messages frozen so far
}

// lifecycleRates is the fixture's rates as the life cycle needs them.
type lifecycleRates struct{ *fakeRates }

func (lifecycleRates) Limits() []policy.LimitInfo { return nil }

func newBulkEnv(t *testing.T) *bulkEnv {
	t.Helper()
	f := newFixture(t, false)
	db, err := bolt.Open(filepath.Join(t.TempDir(), "q.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	q, err := quarantine.New(db, quarantine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sink := mtatest.StartSink(t)
	svc, err := lifecycle.New(q, lifecycle.Options{Rates: lifecycleRates{f.rates}, Logger: slog.New(slog.DiscardHandler),
		Reinjector: &mailout.Reinjector{Addr: sink.Addr(), Helo: "web.test", Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	f.srv.opts.Services.Quarantine = svc
	return &bulkEnv{fixture: f, svc: svc, store: q, sink: sink}
}

// freeze stores n frozen messages of key (sender key@example.org) and
// returns their IDs.
func (e *bulkEnv) freeze(t *testing.T, key string, n int) []string {
	t.Helper()
	var ids []string
	for range n {
		e.n++
		ids = append(ids, e.record(t, key, key+"@example.org", fmt.Sprintf("message %03d", e.n)))
	}
	return ids
}

// record stores one frozen message of key and returns its ID.
func (e *bulkEnv) record(t *testing.T, key, sender, subject string) string {
	t.Helper()
	msg := mtatest.BuildMessage(sender, "rcpt@example.net", subject, "hello\n")
	id, err := e.svc.Record(context.Background(), lifecycle.Message{Request: &policy.Request{Sender: sender, SASLUsername: key},
		Recipients: []string{"rcpt@example.net"}, Body: bytes.NewReader(msg)},
		&policy.Decision{Action: policy.Freeze, Limit: "tenfreeze", Key: key, Rate: 11, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var hiddenID = regexp.MustCompile(`name="id" value="([0-9a-f]{16})"`)

// confirmPage GETs the bulk confirmation for query and returns the IDs
// its form posts and the page.
func (e *bulkEnv) confirmPage(t *testing.T, c *http.Client, query string) ([]string, string) {
	t.Helper()
	resp, page := get(t, c, e.ts.URL+"/quarantine/bulk?"+query)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("confirmation page %s: %s\n%s", query, resp.Status, page)
	}
	var ids []string
	for _, m := range hiddenID.FindAllStringSubmatch(page, -1) {
		ids = append(ids, m[1])
	}
	return ids, page
}

// submit posts the confirmation's form and returns the result page.
func (e *bulkEnv) submit(t *testing.T, c *http.Client, csrf, op string, ids []string, reset bool) string {
	t.Helper()
	form := url.Values{"csrf": {csrf}, "id": ids}
	if reset {
		form.Set("reset", "1")
	}
	resp, page := post(t, c, e.ts.URL+"/quarantine/bulk/"+op, form)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("POST bulk %s: %s\n%s", op, resp.Status, page)
	}
	return page
}

var resultLine = regexp.MustCompile(`<h1>(\d+) (thawed|deleted), (\d+) failed</h1>`)

func counts(t *testing.T, page string) (ok, failed int) {
	t.Helper()
	m := resultLine.FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no result line in\n%s", page)
	}
	fmt.Sscan(m[1], &ok)
	fmt.Sscan(m[3], &failed)
	return ok, failed
}

// TestBulkThawTwoOperatorsDeliverOnce: two sessions confirm a thaw of
// the same 40 frozen messages of one key and submit at once; every
// message reaches the SMTP sink once, the two results add up to 40
// thawed and 40 failed. Three rounds.
func TestBulkThawTwoOperatorsDeliverOnce(t *testing.T) {
	e := newBulkEnv(t)
	var cs []*http.Client
	var tokens []string
	for range 2 {
		c := e.client(t)
		_, csrf := e.login(t, c, "op", "secret-password")
		cs, tokens = append(cs, c), append(tokens, csrf)
	}
	for round := 1; round <= 3; round++ {
		e.freeze(t, "alice", 40)
		var idsOf [2][]string
		for i, c := range cs {
			var page string
			idsOf[i], page = e.confirmPage(t, c, "op=thaw&key=alice")
			if len(idsOf[i]) != 40 || !strings.Contains(page, "Thaw 40 messages?") || !strings.Contains(page, `<p id="more">and 35 more.</p>`) {
				t.Fatalf("round %d: confirmation posts %d IDs:\n%s", round, len(idsOf[i]), page)
			}
		}
		var wg sync.WaitGroup
		pages := make([]string, 2)
		for i, c := range cs {
			wg.Go(func() { pages[i] = e.submit(t, c, tokens[i], "thaw", idsOf[i], false) })
		}
		wg.Wait()
		ok, failed := 0, 0
		for _, p := range pages {
			o, f := counts(t, p)
			ok, failed = ok+o, failed+f
		}
		want := 40 * round
		e.sink.WaitCount(t, want, 30*time.Second)
		seen := map[string]int{}
		for _, m := range e.sink.Messages() {
			seen[m.Header("Message-Id")]++
		}
		for id, n := range seen {
			if n != 1 {
				t.Errorf("round %d: %s delivered %d times", round, id, n)
			}
		}
		if ok != 40 || failed != 40 || len(seen) != want || e.sink.Count() != want {
			t.Fatalf("round %d: %d thawed, %d failed, sink %d (%d distinct); want 40, 40, %d", round, ok, failed, e.sink.Count(), len(seen), want)
		}
	}
}

// TestBulkActsOnTheEntriesShown: the confirmation lists 7 messages; one
// is thawed elsewhere and 2 more arrive before the submit: 6 are thawed,
// the one already thawed is reported failed and not sent again, the 2
// new ones stay frozen.
func TestBulkActsOnTheEntriesShown(t *testing.T) {
	e := newBulkEnv(t)
	c := e.client(t)
	_, csrf := e.login(t, c, "op", "secret-password")
	first := e.freeze(t, "alice", 7)
	ids, page := e.confirmPage(t, c, "op=thaw&sender=alice@example.org")
	if len(ids) != 7 || strings.Count(page, "<td>message 00") != 5 || !strings.Contains(page, "and 2 more") {
		t.Fatalf("confirmation of 7: %d IDs\n%s", len(ids), page)
	}
	if out, err := e.svc.Thaw(context.Background(), lifecycle.Selection{IDs: first[3:4], By: "someone else"}); err != nil || !out[0].OK {
		t.Fatalf("thaw elsewhere: %+v %v", out, err)
	}
	later := e.freeze(t, "alice", 2)
	page = e.submit(t, c, csrf, "thaw", ids, false)
	if ok, failed := counts(t, page); ok != 6 || failed != 1 || !regexp.MustCompile(first[3]+`.*no longer held or frozen`).MatchString(page) {
		t.Fatalf("after a change: %d thawed, %d failed\n%s", ok, failed, page)
	}
	if !strings.Contains(page, "re-injected to "+e.sink.Addr()) {
		t.Errorf("the result does not say where the mail went:\n%s", page)
	}
	e.sink.WaitCount(t, 7, 30*time.Second)
	for _, id := range later {
		if en, err := e.store.Get(id); err != nil || en.State != quarantine.Frozen {
			t.Errorf("%s arrived after the confirmation: %v %v, want frozen", id, en.State, err)
		}
	}
	if n := e.sink.Count(); n != 7 {
		t.Fatalf("sink has %d, want 7", n)
	}
}

// TestBulkCheckedAndReset: checked messages of two keys, thawed with a
// rate reset: each key's rate is reset once; a delete of checked ones
// deletes those only.
func TestBulkCheckedAndReset(t *testing.T) {
	e := newBulkEnv(t)
	c := e.client(t)
	_, csrf := e.login(t, c, "op", "secret-password")
	a, b := e.freeze(t, "alice", 4), e.freeze(t, "bob", 3)
	checked := url.Values{"op": {"thaw-reset"}, "id": append(a[:3:3], b[:2]...)}
	ids, page := e.confirmPage(t, c, checked.Encode())
	if len(ids) != 5 || !strings.Contains(page, "Thaw and reset the rate of 5 messages?") {
		t.Fatalf("checked confirmation: %v\n%s", ids, page)
	}
	page = e.submit(t, c, csrf, "thaw", ids, true)
	if ok, failed := counts(t, page); ok != 5 || failed != 0 {
		t.Fatalf("thaw and reset: %d ok %d failed\n%s", ok, failed, page)
	}
	e.rates.mu.Lock()
	resets := strings.Join(e.rates.resets, " ")
	e.rates.mu.Unlock()
	if resets != "alice/ bob/" {
		t.Fatalf("rate resets %q, want alice's and bob's once each", resets)
	}
	ids, _ = e.confirmPage(t, c, url.Values{"op": {"delete"}, "id": {a[3], b[2], a[0]}}.Encode())
	if len(ids) != 2 {
		t.Fatalf("delete confirmation lists %v: the thawed %s is not pending", ids, a[0])
	}
	if ok, failed := counts(t, e.submit(t, c, csrf, "delete", ids, false)); ok != 2 || failed != 0 {
		t.Fatalf("delete: %d ok %d failed", ok, failed)
	}
	if es, _ := e.store.List(quarantine.Filter{}); len(es) != 0 {
		t.Fatalf("still pending: %+v", es)
	}
}

// TestBulkRefusals: a viewer sees no bulk form and gets 403 for the
// confirmation and the submit; a submit without the CSRF token is 403;
// a selection of nothing, of thawed messages or of too many IDs is 400.
// Nothing is released.
func TestBulkRefusals(t *testing.T) {
	e := newBulkEnv(t)
	ids := e.freeze(t, "alice", 3)
	v := e.client(t)
	_, vcsrf := e.login(t, v, "view", "secret-password")
	if _, page := get(t, v, e.ts.URL+"/quarantine?key=alice"); strings.Contains(page, `id="bulk"`) || strings.Contains(page, "checkbox") ||
		strings.Contains(page, "/quarantine/bulk") || !strings.Contains(page, ids[0]) {
		t.Fatalf("viewer's quarantine page offers bulk actions:\n%s", page)
	}
	if resp, _ := get(t, v, e.ts.URL+"/quarantine/bulk?op=thaw&key=alice"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("viewer's confirmation: %s, want 403", resp.Status)
	}
	if resp, _ := post(t, v, e.ts.URL+"/quarantine/bulk/thaw", url.Values{"csrf": {vcsrf}, "id": ids}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("viewer's submit: %s, want 403", resp.Status)
	}
	c := e.client(t)
	_, csrf := e.login(t, c, "op", "secret-password")
	if _, page := get(t, c, e.ts.URL+"/quarantine?key=alice"); strings.Count(page, `type="checkbox"`) != 3 || !strings.Contains(page, `id="all-thaw"`) {
		t.Fatalf("operator's quarantine page lacks the bulk actions:\n%s", page)
	}
	if resp, _ := post(t, c, e.ts.URL+"/quarantine/bulk/thaw", url.Values{"id": ids}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("submit without the CSRF token: %s, want 403", resp.Status)
	}
	for _, q := range []string{"op=thaw", "op=thaw&state=thawed", "op=thaw&key=nobody", "op=freeze&key=alice"} {
		if resp, _ := get(t, c, e.ts.URL+"/quarantine/bulk?"+q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("confirmation %s: %s, want 400", q, resp.Status)
		}
	}
	many := make([]string, maxListed+1)
	for i := range many {
		many[i] = fmt.Sprintf("%016x", i)
	}
	for op, form := range map[string]url.Values{"thaw": {"csrf": {csrf}}, "delete": {"csrf": {csrf}, "id": many}, "release": {"csrf": {csrf}, "id": ids}} {
		if resp, _ := post(t, c, e.ts.URL+"/quarantine/bulk/"+op, form); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("POST %s of %d IDs: %s, want 400", op, len(form["id"]), resp.Status)
		}
	}
	if es, _ := e.store.List(quarantine.Filter{}); len(es) != 3 || e.sink.Count() != 0 {
		t.Fatalf("after refusals: %d pending, sink %d; want 3 and 0", len(es), e.sink.Count())
	}
}

// TestBulkPagesShowMarkupAsText: a sender and subject full of markup
// are text on the confirmation and the result page.
func TestBulkPagesShowMarkupAsText(t *testing.T) {
	const evil = `<script>alert(1)</script><img src=http://192.0.2.1/x.png>`
	e := newBulkEnv(t)
	c := e.client(t)
	_, csrf := e.login(t, c, "op", "secret-password")
	e.record(t, "mallory", `"`+evil+`"@example.org`, "offer "+evil)
	ids, page := e.confirmPage(t, c, "op=delete&key=mallory")
	done := e.submit(t, c, csrf, "delete", ids, false)
	for name, p := range map[string]string{"confirmation": page, "result": done} {
		if strings.Contains(p, "<script") || strings.Contains(p, "<img") || !strings.Contains(p, "&lt;script&gt;") {
			t.Errorf("%s page renders the markup:\n%s", name, p)
		}
	}
	if !strings.Contains(page, "offer &lt;script&gt;") {
		t.Errorf("confirmation lacks the subject as text:\n%s", page)
	}
}

// TestBulkRunsToTheEndWithoutTheBrowser: a browser that gives up while
// 100 messages are being thawed does not stop the thaw half-way.
func TestBulkRunsToTheEndWithoutTheBrowser(t *testing.T) {
	e := newBulkEnv(t)
	c := e.client(t)
	_, csrf := e.login(t, c, "op", "secret-password")
	e.freeze(t, "alice", 100)
	ids, _ := e.confirmPage(t, c, "op=thaw&key=alice")
	c.Timeout = 50 * time.Millisecond
	if resp, err := c.PostForm(e.ts.URL+"/quarantine/bulk/thaw", url.Values{"csrf": {csrf}, "id": ids}); err == nil {
		resp.Body.Close()
		t.Log("the thaw ended within the client's timeout: nothing was cut off")
	}
	e.sink.WaitCount(t, 100, 60*time.Second)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if es, _ := e.store.List(quarantine.Filter{}); len(es) == 0 {
			return
		}
	}
	es, _ := e.store.List(quarantine.Filter{})
	t.Fatalf("%d still frozen after the browser left", len(es))
}
