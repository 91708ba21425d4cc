package notify

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/policy"
)

// hook is a webhook receiver on 127.0.0.1 that answers the i-th request
// with codes[i] (200 after the list) and keeps every body and header.
type hook struct {
	srv   *httptest.Server
	mu    sync.Mutex
	codes []int
	reqs  []received
	block chan struct{} // when non-nil, each request waits for it
}

type received struct {
	body   []byte
	header http.Header
}

func startHook(t *testing.T, codes ...int) *hook {
	h := &hook{codes: codes}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.block != nil {
			<-h.block
		}
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		i := len(h.reqs)
		h.reqs = append(h.reqs, received{b, r.Header.Clone()})
		code := 200
		if i < len(h.codes) {
			code = h.codes[i]
		}
		h.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hook) requests() []received {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]received(nil), h.reqs...)
}

func fast(c *Config) {
	c.Webhook.Backoff = policy.Duration(time.Millisecond)
	c.Webhook.MaxBackoff = policy.Duration(2 * time.Millisecond)
	c.Mail.Backoff = policy.Duration(time.Millisecond)
	c.Mail.MaxBackoff = policy.Duration(20 * time.Millisecond)
}

func newNotifier(t *testing.T, c Config, o Options) *Notifier {
	t.Helper()
	n, err := New(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	return n
}

// closeAndWait sends everything queued (Close drains the queue).
func closeAndWait(t *testing.T, n *Notifier) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

var refusal = Event{Kind: LimitRefused, Time: time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), Key: "alice",
	Limit: "hourly", Period: time.Hour, Action: "defer", Rate: 200.97038961731997, Max: 200, Sender: "alice@example.org", Client: "192.0.2.7"}

func TestWebhookSignedAndRetried(t *testing.T) {
	h := startHook(t, 503, 502, 200)
	c := Config{Webhook: Webhook{URL: h.srv.URL + "/hook", Secret: "s3cret"}}
	fast(&c)
	n := newNotifier(t, c, Options{})
	if !n.Notify(refusal) {
		t.Fatal("Notify refused the first refusal")
	}
	closeAndWait(t, n)
	reqs := h.requests()
	if len(reqs) != 3 {
		t.Fatalf("webhook got %d requests, want 3 (two 5xx retried)", len(reqs))
	}
	for i, r := range reqs {
		want := Sign([]byte("s3cret"), r.body)
		if got := r.header.Get(SignatureHeader); !hmac.Equal([]byte(got), []byte(want)) {
			t.Errorf("request %d: signature %q, want %q", i, got, want)
		}
		if got := r.header.Get(EventHeader); got != "limit_refused" {
			t.Errorf("request %d: %s = %q", i, EventHeader, got)
		}
	}
	var p map[string]any
	if err := json.Unmarshal(reqs[2].body, &p); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{"event": "limit_refused", "key": "alice", "limit": "hourly", "period": "1h",
		"rate": 200.97, "max": 200.0, "action": "defer", "sender": "alice@example.org", "time": "2026-11-23T09:00:00Z",
		"summary": "alice is over limit hourly: 201 per 1h (limit 200), action defer"} {
		if p[k] != want {
			t.Errorf("payload %s = %#v, want %#v", k, p[k], want)
		}
	}
	if st := n.Stats(); st.Sent != 1 || st.Failed != 0 {
		t.Errorf("stats %+v, want 1 sent, 0 failed", st)
	}
}

func TestWebhookGivesUp(t *testing.T) {
	for _, tc := range []struct {
		code, attempts, want int
	}{{500, 3, 3}, {429, 2, 2}, {400, 5, 1}, {404, 5, 1}} {
		h := startHook(t, tc.code, tc.code, tc.code, tc.code, tc.code)
		c := Config{Webhook: Webhook{URL: h.srv.URL, Retry: Retry{Attempts: tc.attempts}}}
		fast(&c)
		n := newNotifier(t, c, Options{})
		n.Notify(Event{Kind: RateReset, Key: "bob", By: "root (uid 0, pid 1)"})
		closeAndWait(t, n)
		if got := len(h.requests()); got != tc.want {
			t.Errorf("HTTP %d: %d attempts, want %d", tc.code, got, tc.want)
		}
		if st := n.Stats(); st.Failed != 1 || st.Sent != 0 {
			t.Errorf("HTTP %d: stats %+v, want 1 failed", tc.code, st)
		}
	}
}

// TestWebhookFailureLogHidesCredentials: the log line of a webhook that
// cannot be reached names its host and path, never the user information
// or query of its URL (they may hold tokens).
func TestWebhookFailureLogHidesCredentials(t *testing.T) {
	h := startHook(t)
	addr := h.srv.Listener.Addr().String()
	h.srv.Close() // nothing listens there now
	var logs mtatest.SyncBuffer
	c := Config{Webhook: Webhook{URL: "http://hookuser:hookpass@" + addr + "/hook?token=s3cret", Retry: Retry{Attempts: 1}}}
	fast(&c)
	n := newNotifier(t, c, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	n.Notify(Event{Kind: RateReset, Key: "bob"})
	closeAndWait(t, n)
	out := logs.String()
	if !strings.Contains(out, "notification failed") || !strings.Contains(out, addr+"/hook?…") {
		t.Fatalf("no failure logged with the redacted URL:\n%s", out)
	}
	for _, secret := range []string{"hookuser", "hookpass", "s3cret"} {
		if strings.Contains(out, secret) {
			t.Errorf("log shows %q:\n%s", secret, out)
		}
	}
}

func TestWebhookUnsignedWithoutSecret(t *testing.T) {
	h := startHook(t)
	n := newNotifier(t, Config{Webhook: Webhook{URL: h.srv.URL}}, Options{})
	n.Notify(Event{Kind: Thawed, Key: "alice", Count: 3, By: "root (uid 0, pid 7)"})
	closeAndWait(t, n)
	r := h.requests()
	if len(r) != 1 || r[0].header.Get(SignatureHeader) != "" {
		t.Fatalf("want one unsigned request, got %d (signature %q)", len(r), r[0].header.Get(SignatureHeader))
	}
	if !strings.Contains(string(r[0].body), `"summary":"3 quarantined messages thawed of alice by root (uid 0, pid 7)"`) {
		t.Errorf("payload %s", r[0].body)
	}
}

// TestRefusalOncePerKeyLimitPeriod: a spam run refused thousands of times
// gives one event per key, limit and period.
func TestRefusalOncePerKeyLimitPeriod(t *testing.T) {
	h := startHook(t)
	now := refusal.Time
	n := newNotifier(t, Config{Webhook: Webhook{URL: h.srv.URL}}, Options{Now: func() time.Time { return now }})
	sent := 0
	for i := range 5000 {
		e := refusal
		e.Time = now.Add(time.Duration(i) * 700 * time.Millisecond) // 58 min
		if n.Notify(e) {
			sent++
		}
	}
	if sent != 1 {
		t.Fatalf("%d events for one key within its period, want 1", sent)
	}
	other := refusal
	other.Limit = "daily"
	other.Period = 24 * time.Hour
	if !n.Notify(other) {
		t.Error("the same key refused by another limit was suppressed")
	}
	other.Key, other.Limit = "bob", "hourly"
	if !n.Notify(other) {
		t.Error("another key was suppressed")
	}
	later := refusal
	later.Time = now.Add(time.Hour)
	if !n.Notify(later) {
		t.Error("a refusal one period later was suppressed")
	}
	if n.Notify(later) {
		t.Error("the repeat of that refusal was sent")
	}
	closeAndWait(t, n)
	if got := len(h.requests()); got != 4 {
		t.Errorf("webhook got %d events, want 4", got)
	}
	if st := n.Stats(); st.Suppressed != 4999+1 {
		t.Errorf("suppressed %d, want 5000", st.Suppressed)
	}
}

// TestRefusalMemoryBounded: distinct keys beyond notify.max_keys are
// suppressed (never sent twice), and expired ones make room again.
func TestRefusalMemoryBounded(t *testing.T) {
	h := startHook(t)
	n := newNotifier(t, Config{MaxKeys: 100, QueueSize: 10000, Webhook: Webhook{URL: h.srv.URL}}, Options{})
	t0 := refusal.Time
	ok := 0
	for i := range 1000 {
		e := refusal
		e.Key = "user" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		e.Time = t0.Add(time.Duration(i) * time.Millisecond)
		if n.Notify(e) {
			ok++
		}
	}
	if ok != 100 {
		t.Errorf("%d distinct keys notified, want the first 100 (max_keys)", ok)
	}
	n.mu.Lock()
	size := n.seen.Len()
	n.mu.Unlock()
	if size > 100 {
		t.Errorf("dedup map holds %d keys, more than max_keys 100", size)
	}
	e := refusal
	e.Key = "late"
	e.Time = t0.Add(2 * time.Hour) // every window has expired
	if !n.Notify(e) {
		t.Error("a new key after every window expired was suppressed")
	}
	n.mu.Lock()
	size = n.seen.Len()
	n.mu.Unlock()
	if size > 100 {
		t.Errorf("dedup map holds %d keys after pruning", size)
	}
}

// TestQueueFullDrops: a stuck webhook never blocks Notify; what does not
// fit the queue is dropped and counted.
func TestQueueFullDrops(t *testing.T) {
	h := startHook(t)
	h.block = make(chan struct{})
	n := newNotifier(t, Config{QueueSize: 3, Webhook: Webhook{URL: h.srv.URL}}, Options{})
	accepted := 0
	for i := range 50 {
		if n.Notify(Event{Kind: RateReset, Key: "k" + string(rune('a'+i))}) {
			accepted++
		}
	}
	// One event may be in flight (taken off the queue), three queued.
	if accepted > 4 || accepted < 3 {
		t.Errorf("%d of 50 events accepted with a queue of 3 and a stuck receiver", accepted)
	}
	st := n.Stats()
	if st.Dropped != int64(50-accepted) {
		t.Errorf("dropped %d, want %d", st.Dropped, 50-accepted)
	}
	close(h.block)
	closeAndWait(t, n)
	if got := len(h.requests()); got != accepted {
		t.Errorf("receiver got %d, want the %d accepted", got, accepted)
	}
	if n.Notify(Event{Kind: RateReset}) {
		t.Error("Notify after Close accepted an event")
	}
}

func TestCloseDeadlineAbandons(t *testing.T) {
	h := startHook(t)
	h.block = make(chan struct{})
	defer close(h.block)
	n, err := New(Config{Webhook: Webhook{URL: h.srv.URL}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	n.Notify(Event{Kind: RateReset, Key: "a"})
	n.Notify(Event{Kind: RateReset, Key: "b"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := n.Close(ctx); err != context.Canceled {
		t.Errorf("Close with a done context = %v, want context.Canceled", err)
	}
	if st := n.Stats(); st.Failed != 2 {
		t.Errorf("stats %+v, want both events failed", st)
	}
	if err := n.Close(context.Background()); err != ErrClosed {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

func TestEventsFilter(t *testing.T) {
	h := startHook(t)
	n := newNotifier(t, Config{Events: []string{"rate_reset"}, Webhook: Webhook{URL: h.srv.URL}}, Options{})
	if n.Notify(refusal) {
		t.Error("limit_refused sent though events lists only rate_reset")
	}
	if !n.Notify(Event{Kind: RateReset, Key: "a"}) {
		t.Error("rate_reset not sent")
	}
	var off *Notifier
	if off.Notify(refusal) {
		t.Error("a nil Notifier accepted an event")
	}
	none := newNotifier(t, Config{}, Options{})
	if none.Notify(refusal) {
		t.Error("a Notifier without webhook or mail accepted an event")
	}
}

func TestMailToPostmasterAndSender(t *testing.T) {
	sink := mtatest.StartSink(t)
	c := Config{Mail: Mail{Relay: sink.Addr(), From: "ratelimitd <ratelimitd@mx.example.org>",
		To: []string{"postmaster@example.org", "abuse@example.org"}, NotifySender: true,
		Subject: "limit {{.Limit}} hit by {{.Key}}\n(injected)"}}
	fast(&c)
	n := newNotifier(t, c, Options{})
	n.Notify(refusal)
	closeAndWait(t, n)
	msgs := sink.WaitCount(t, 2, 10*time.Second)
	pm, snd := msgs[0], msgs[1]
	if pm.From != "ratelimitd@mx.example.org" || strings.Join(pm.To, ",") != "postmaster@example.org,abuse@example.org" {
		t.Errorf("postmaster envelope %q -> %q", pm.From, pm.To)
	}
	if got := pm.Header("Subject"); got != "limit hourly hit by alice (injected)" {
		t.Errorf("subject %q (line breaks must not split the header)", got)
	}
	if got := pm.Header("Auto-Submitted"); got != "auto-generated" {
		t.Errorf("Auto-Submitted %q", got)
	}
	if pm.Header("Message-Id") == "" || pm.Header("Date") == "" {
		t.Error("no Message-Id or Date")
	}
	body := string(pm.Body())
	for _, want := range []string{"alice is over limit hourly: 201 per 1h (limit 200), action defer", "key:    alice",
		"client: 192.0.2.7", "rate:   201 per 1h (limit 200)", "ratelimitd rate reset alice"} {
		if !strings.Contains(body, want) {
			t.Errorf("postmaster body lacks %q:\n%s", want, body)
		}
	}
	if strings.Join(snd.To, ",") != "alice@example.org" || snd.Header("Subject") != DefaultSenderSubject {
		t.Errorf("sender mail to %q subject %q", snd.To, snd.Header("Subject"))
	}
	if b := string(snd.Body()); !strings.Contains(b, "sent 201 messages per 1h; the limit is 200") || !strings.Contains(b, "deferred") {
		t.Errorf("sender body:\n%s", b)
	}
	if st := n.Stats(); st.Sent != 2 {
		t.Errorf("stats %+v, want 2 sent", st)
	}
}

// TestMailRetriesTemporaryFailure: a 451 from the relay is retried until
// it accepts; a 550 is not retried.
func TestMailRetriesTemporaryFailure(t *testing.T) {
	sink := mtatest.StartSink(t)
	sink.SetReply(mtatest.StageMail, &gosmtp.SMTPError{Code: 451, EnhancedCode: gosmtp.EnhancedCode{4, 3, 0}, Message: "try later"})
	c := Config{Mail: Mail{Relay: sink.Addr(), From: "ratelimitd@example.org", To: []string{"postmaster@example.org"}, Retry: Retry{Attempts: 500}}}
	fast(&c)
	n := newNotifier(t, c, Options{})
	n.Notify(Event{Kind: Deleted, Key: "mallory", Count: 40, By: "root (uid 0, pid 9)"})
	for i := 0; sink.Rejected() < 2; i++ {
		if i > 10000 {
			t.Fatal("relay saw fewer than 2 attempts")
		}
		time.Sleep(time.Millisecond)
	}
	sink.SetReply(mtatest.StageMail, nil)
	m := sink.WaitCount(t, 1, 30*time.Second)[0]
	if !strings.Contains(m.Header("Subject"), "40 quarantined messages deleted of mallory by root (uid 0, pid 9)") {
		t.Errorf("subject %q", m.Header("Subject"))
	}
	closeAndWait(t, n)

	sink.Reset()
	sink.SetReply(mtatest.StageRcpt, &gosmtp.SMTPError{Code: 550, EnhancedCode: gosmtp.EnhancedCode{5, 1, 1}, Message: "no such user"})
	n2 := newNotifier(t, c, Options{})
	n2.Notify(Event{Kind: RateReset, Key: "x"})
	closeAndWait(t, n2)
	if got := sink.Rejected(); got != 1 {
		t.Errorf("a 550 was tried %d times, want 1", got)
	}
	if st := n2.Stats(); st.Failed != 1 {
		t.Errorf("stats %+v, want 1 failed", st)
	}
}

func TestConfigErrorsNameKeys(t *testing.T) {
	c := Config{Events: []string{"limit_refused", "spam"}, Webhook: Webhook{URL: "ftp://x"},
		Mail: Mail{To: []string{"pm@example.org"}, Relay: "nocolon", Body: "{{.Nope}}", Subject: "{{"}}
	c.WithDefaults()
	var got []string
	for _, e := range c.Validate() {
		got = append(got, e.Error())
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{`notify.events[1]: "spam" is not one of`, "notify.webhook.url:", "notify.mail.from: is required",
		"notify.mail.relay:", "notify.mail.body:", "notify.mail.subject:"} {
		if !strings.Contains(all, want) {
			t.Errorf("errors lack %q:\n%s", want, all)
		}
	}
	if _, err := New(c, Options{}); err == nil {
		t.Error("New accepted an invalid configuration")
	}
}
