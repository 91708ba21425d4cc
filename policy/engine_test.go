package policy_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/ratestore"
)

var t0 = time.Date(2026, 11, 20, 18, 0, 0, 0, time.UTC) // a Friday evening

func hourlyDaily() policy.Config {
	return policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 200, Period: policy.Duration(time.Hour), Mode: "leaky", Action: "defer"},
		{Name: "daily", Key: []string{"sasl_username"}, Limit: 1000, Period: policy.Duration(24 * time.Hour), Mode: "strict", Action: "defer"},
	}}
}

func newEngine(t testing.TB, c policy.Config) *policy.Engine {
	t.Helper()
	e, err := policy.NewEngine(c, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func eom(user string) *policy.Request {
	return &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: user, Sender: user + "@example.org",
		RecipientCount: 1, ClientAddress: "192.0.2.7", Size: 2048}
}

// The seed-002 scenario: a compromised account sending 150/hour, under the
// hourly limit, all weekend is stopped by the strict daily limit.
func TestWeekendSpamStoppedByDailyLimit(t *testing.T) {
	e := newEngine(t, hourlyDaily())
	ctx := context.Background()
	interval := time.Hour / 150
	admitted, firstRefused := 0, time.Duration(-1)
	for i := 0; i < 150*60; i++ { // Friday 18:00 to Monday 06:00
		now := t0.Add(time.Duration(i) * interval)
		d := e.Evaluate(ctx, now, eom("alice"))
		if d.Fault != nil {
			t.Fatal(d.Fault)
		}
		switch d.Action {
		case policy.Pass:
			admitted++
		case policy.Defer:
			if firstRefused < 0 {
				firstRefused = now.Sub(t0)
				if d.Limit != "daily" {
					t.Fatalf("first refusal by %q, want daily: %s", d.Limit, d.Reason)
				}
			}
		default:
			t.Fatalf("unexpected action %v", d.Action)
		}
	}
	t.Logf("first refused after %v, %d admitted over the weekend", firstRefused, admitted)
	if firstRefused < 0 || firstRefused > 8*time.Hour {
		t.Fatalf("daily limit first refused after %v, want within 8h", firstRefused)
	}
	if admitted < 1100 || admitted > 1250 {
		t.Fatalf("admitted %d messages, want about 1,170", admitted)
	}
}

func TestHourlyBurstThenDefer(t *testing.T) {
	e := newEngine(t, hourlyDaily())
	ctx := context.Background()
	for i := 1; i <= 200; i++ {
		if d := e.Evaluate(ctx, t0, eom("bob")); d.Action != policy.Pass {
			t.Fatalf("message %d: %v %s", i, d.Action, d.Reason)
		}
	}
	d := e.Evaluate(ctx, t0, eom("bob"))
	if d.Action != policy.Defer || d.Code != 450 || d.Enhanced != "4.7.1" || d.Limit != "hourly" {
		t.Fatalf("201st: %+v", d)
	}
	if !strings.Contains(d.Text, "201 per 1h (limit 200)") || d.RetryAfter <= 0 {
		t.Fatalf("text %q retry %v", d.Text, d.RetryAfter)
	}
	// Another user is unaffected.
	if d := e.Evaluate(ctx, t0, eom("carol")); d.Action != policy.Pass {
		t.Fatalf("carol: %+v", d)
	}
	// A new message is deferred at its first RCPT, where its attempt is
	// counted (strict daily); its later RCPTs get the same answer and are
	// not counted again.
	rcpt := &policy.Request{ProtocolState: policy.StateRcpt, SASLUsername: "bob", Recipient: "x@example.net", Instance: "m202"}
	var first string
	for i := range 3 {
		d := e.Evaluate(ctx, t0, rcpt)
		if d.Action != policy.Defer || d.Repeated != (i > 0) {
			t.Fatalf("RCPT %d: %+v", i+1, d)
		}
		if i == 0 {
			first = d.Text
		} else if d.Text != first {
			t.Fatalf("RCPT %d text %q, first RCPT said %q", i+1, d.Text, first)
		}
	}
	kr, err := e.Lookup(ctx, t0, "bob")
	if err != nil || len(kr) != 2 {
		t.Fatalf("lookup %v %v", kr, err)
	}
	if kr[0].Rate > 200.001 {
		t.Fatalf("leaky hourly counted refused requests: %v", kr[0].Rate)
	}
	if kr[1].Rate < 201.9 || kr[1].Rate > 202.1 {
		t.Fatalf("strict daily should count the refused attempts once each (202), got %v", kr[1].Rate)
	}
	// Reset forgets bob at once.
	if n, err := e.Reset(ctx, "bob", ""); err != nil || n != 2 {
		t.Fatalf("reset: %d %v", n, err)
	}
	if d := e.Evaluate(ctx, t0, eom("bob")); d.Action != policy.Pass {
		t.Fatalf("after reset: %+v", d)
	}
	if _, err := e.Reset(ctx, "bob", "nosuch"); !errors.Is(err, policy.ErrUnknownLimit) {
		t.Fatalf("reset unknown limit: %v", err)
	}
}

func TestUnauthenticatedNotCounted(t *testing.T) {
	e := newEngine(t, hourlyDaily())
	for range 500 {
		if d := e.Evaluate(context.Background(), t0, eom("")); d.Action != policy.Pass || len(d.Measures) != 0 {
			t.Fatalf("empty user was measured: %+v", d)
		}
	}
}

// A leaky limit counts a request only if the whole stack admitted it.
func TestLeakyCountsOnlyAdmitted(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "tight", Key: []string{"sasl_username"}, Limit: 2, Period: policy.Duration(time.Hour), Mode: "strict"},
		{Name: "loose", Key: []string{"sasl_username"}, Limit: 100, Period: policy.Duration(time.Hour), Mode: "leaky"},
	}}
	e := newEngine(t, c)
	for range 10 {
		e.Evaluate(context.Background(), t0, eom("erin"))
	}
	kr, _ := e.Lookup(context.Background(), t0, "erin")
	if len(kr) != 2 || kr[0].Rate < 9.9 || kr[1].Rate > 2.001 {
		t.Fatalf("strict should count 10, leaky 2: %+v", kr)
	}
}

func TestCostUnits(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "rcpts", Key: []string{"sasl_username"}, Limit: 5, Period: policy.Duration(time.Hour), Per: "rcpt"},
		{Name: "bytes", Key: []string{"sasl_username"}, Limit: 10 << 20, Period: policy.Duration(time.Hour), Per: "byte"},
	}}
	e := newEngine(t, c)
	ctx := context.Background()
	rcpt := &policy.Request{ProtocolState: policy.StateRcpt, SASLUsername: "fay", Recipient: "a@example.net", Instance: "i1"}
	for i := 1; i <= 6; i++ {
		d := e.Evaluate(ctx, t0, rcpt)
		if (i <= 5) != (d.Action == policy.Pass) {
			t.Fatalf("rcpt %d: %v", i, d.Action)
		}
	}
	big := &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: "gus", RecipientCount: 1, Size: 4 << 20}
	for i := 1; i <= 3; i++ {
		d := e.Evaluate(ctx, t0, big)
		if (i <= 2) != (d.Action == policy.Pass) {
			t.Fatalf("4 MiB message %d against 10 MiB/h: %v %s", i, d.Action, d.Reason)
		}
	}
}

func TestPerMailAtFirstRcptWhenOnlyRcptHooked(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "mails", Key: []string{"sender"}, Limit: 2, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	ctx := context.Background()
	send := func(inst string, rcpts int) policy.Action {
		var last policy.Action
		for range rcpts {
			last = e.Evaluate(ctx, t0, &policy.Request{ProtocolState: policy.StateRcpt, Sender: "h@example.org", Instance: inst}).Action
		}
		return last
	}
	if send("m1", 5) != policy.Pass || send("m2", 5) != policy.Pass {
		t.Fatal("two messages with five recipients each must count as two mails")
	}
	if send("m3", 1) != policy.Defer {
		t.Fatal("third message must be deferred")
	}
}

func TestExemptionsAndOverrides(t *testing.T) {
	c := hourlyDaily()
	c.Exempt = policy.Exempt{Networks: []string{"10.0.0.0/8"}, Users: []string{"Monitor"}, Senders: []string{"@lists.example.org"}}
	c.Limits[0].Overrides = map[string]float64{"newsletter": 5000}
	e := newEngine(t, c)
	ctx := context.Background()
	for _, r := range []*policy.Request{
		{ProtocolState: policy.StateEndOfMessage, SASLUsername: "x", ClientAddress: "10.1.2.3"},
		{ProtocolState: policy.StateEndOfMessage, SASLUsername: "monitor"},
		{ProtocolState: policy.StateEndOfMessage, SASLUsername: "y", Sender: "bounce@Lists.Example.org"},
	} {
		for range 300 {
			if d := e.Evaluate(ctx, t0, r); d.Action != policy.Pass || len(d.Measures) != 0 {
				t.Fatalf("exempt request measured: %+v", d)
			}
		}
	}
	for i := range 900 {
		if d := e.Evaluate(ctx, t0, eom("newsletter")); d.Action != policy.Pass {
			t.Fatalf("override: message %d %v %s", i+1, d.Action, d.Reason)
		}
	}
}

func TestClientSubnetKey(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "net", Key: []string{"client_subnet"}, Limit: 3, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	for i, addr := range []string{"192.0.2.1", "192.0.2.77", "192.0.2.200", "192.0.2.9", "2001:db8:1:2::1", "::ffff:198.51.100.1"} {
		d := e.Evaluate(context.Background(), t0, &policy.Request{ProtocolState: policy.StateEndOfMessage, ClientAddress: addr})
		want := policy.Pass
		if i == 3 {
			want = policy.Defer
		}
		if d.Action != want {
			t.Fatalf("%s: %v", addr, d.Action)
		}
		if i == 4 && d.Measures[0].Key != "2001:db8:1:2::/64" {
			t.Fatalf("v6 key %q", d.Measures[0].Key)
		}
		if i == 5 && d.Measures[0].Key != "198.51.100.0/24" {
			t.Fatalf("mapped v4 key %q", d.Measures[0].Key)
		}
	}
}

// faultyStore fails every call, to show the engine fails open.
type faultyStore struct{ policy.Store }

func (faultyStore) Get(context.Context, string, string) (ratelimit.State, error) {
	return ratelimit.State{}, errors.New("disk on fire")
}

func TestFaultsFailOpen(t *testing.T) {
	for _, st := range []policy.Store{faultyStore{}} {
		e, err := policy.NewEngine(hourlyDaily(), st)
		if err != nil {
			t.Fatal(err)
		}
		d := e.Evaluate(context.Background(), t0, eom("ivy"))
		if d.Action != policy.Pass || d.Fault == nil {
			t.Fatalf("%T: %+v", st, d)
		}
	}
}

// TestMessageTemplateExpanded: the template's words are filled in; the
// front ends make the text safe for the wire (mta.ReplyText).
func TestMessageTemplateExpanded(t *testing.T) {
	c := hourlyDaily()
	c.Limits[0].Limit = 1
	c.Limits[0].Message = "slow down {key}\r\n550 injected\x00 {rate}/{period} max {limit} retry {retry} " + strings.Repeat("é", 400)
	e := newEngine(t, c)
	e.Evaluate(context.Background(), t0, eom("jo"))
	d := e.Evaluate(context.Background(), t0, eom("jo"))
	if d.Action != policy.Defer {
		t.Fatalf("%+v", d)
	}
	text := mta.ReplyText(d.Text, mta.MaxTextLen)
	if strings.ContainsAny(text, "\r\n\x00") || len(text) > mta.MaxTextLen {
		t.Fatalf("unsafe text %q (%d bytes)", text, len(text))
	}
	if !strings.HasPrefix(text, "slow down jo 550 injected 2.0/1h max 1 retry 1h") {
		t.Fatalf("text %q", text[:80])
	}
}

func TestReloadKeepsOldOnError(t *testing.T) {
	e := newEngine(t, hourlyDaily())
	bad := hourlyDaily()
	bad.Limits[0].Mode = "sloppy"
	if err := e.Reload(bad); !errors.Is(err, policy.ErrInvalidConfig) {
		t.Fatalf("reload of invalid config: %v", err)
	}
	if got := e.Limits()[0].Mode; got != "leaky" {
		t.Fatalf("old config replaced: %s", got)
	}
}

func BenchmarkEvaluateTwoLimits(b *testing.B) {
	e := newEngine(b, hourlyDaily())
	ctx := context.Background()
	reqs := make([]*policy.Request, 1000)
	for i := range reqs {
		reqs[i] = eom(fmt.Sprintf("user%d", i))
	}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Second)
		e.Evaluate(ctx, now, reqs[i%len(reqs)])
	}
}

func TestViaRestrictsFrontEnd(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "m", Key: []string{"sasl_username"}, Limit: 1, Period: policy.Duration(time.Hour), Action: "freeze", Via: []string{"milter"}},
	}}
	e := newEngine(t, c)
	r := eom("kim")
	r.Stage = policy.ViaPolicy
	for range 5 {
		if d := e.Evaluate(context.Background(), t0, r); d.Action != policy.Pass || len(d.Measures) != 0 {
			t.Fatalf("policy request measured by a milter-only limit: %+v", d)
		}
	}
	r.Stage = policy.ViaMilter
	e.Evaluate(context.Background(), t0, r)
	if d := e.Evaluate(context.Background(), t0, r); d.Action != policy.Freeze {
		t.Fatalf("milter request: %+v", d)
	}
	c.Limits[0].Via = []string{"smtp"}
	if _, err := policy.NewEngine(c, ratestore.NewMemory(ratestore.MemoryOptions{})); err == nil {
		t.Fatal("via = smtp accepted")
	}
}

func TestMessageLargerThanLimit(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "bytes", Key: []string{"sasl_username"}, Limit: 1 << 20, Period: policy.Duration(time.Hour), Per: "byte",
			Message: "{unknown} {name}: retry {retry}"},
	}}
	e := newEngine(t, c)
	r := eom("lea")
	r.Size = 2 << 20
	d := e.Evaluate(context.Background(), t0, r)
	if d.Action != policy.Defer || d.Text != "{unknown} bytes: retry never (message larger than the limit)" {
		t.Fatalf("%+v", d)
	}
}

// oneLimitFails fails Get and Update for one limit only, as a store does
// for a key that is too long or when it is full.
type oneLimitFails struct {
	policy.Store
	limit string
}

func (s oneLimitFails) Get(ctx context.Context, limit, key string) (ratelimit.State, error) {
	if limit == s.limit {
		return ratelimit.State{}, ratestore.ErrKeyTooLong
	}
	return s.Store.Get(ctx, limit, key)
}

// A store error in one limit leaves the other limits' verdict standing
// (issue: one ErrKeyTooLong threw away another limit's Defer).
func TestStoreErrorInOneLimitKeepsOthersVerdict(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "broken", Key: []string{"sender"}, Limit: 1000, Period: policy.Duration(time.Hour)},
		{Name: "tight", Key: []string{"sasl_username"}, Limit: 1, Period: policy.Duration(time.Hour)},
	}}
	e, err := policy.NewEngine(c, oneLimitFails{Store: ratestore.NewMemory(ratestore.MemoryOptions{}), limit: "broken"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e.Evaluate(ctx, t0, eom("mo"))
	d := e.Evaluate(ctx, t0, eom("mo"))
	if d.Action != policy.Defer || d.Limit != "tight" {
		t.Fatalf("second message: %v by %q, want defer by tight", d.Action, d.Limit)
	}
	if !errors.Is(d.Fault, ratestore.ErrKeyTooLong) {
		t.Fatalf("fault %v, want the broken limit's error reported", d.Fault)
	}
}

// OmitMeasures gives the same verdicts, counts and bookkeeping without the
// Measures: two engines fed the same messages (RCPT then END-OF-MESSAGE,
// past the hourly limit) agree request by request.
func TestOmitMeasuresKeepsVerdicts(t *testing.T) {
	omit := hourlyDaily()
	omit.OmitMeasures = true
	ev, de := newEngine(t, hourlyDaily()), newEngine(t, omit)
	ctx := context.Background()
	for i := range 205 {
		for _, state := range []string{policy.StateRcpt, policy.StateEndOfMessage} {
			r := eom("ann")
			r.ProtocolState, r.Instance = state, fmt.Sprintf("m%d", i)
			a := ev.Evaluate(ctx, t0, r)
			b := de.Evaluate(ctx, t0, r)
			if (state == policy.StateRcpt && len(a.Measures) != 2) || b.Measures != nil {
				t.Fatalf("message %d %s: Evaluate %d measures, Decide %d", i, state, len(a.Measures), len(b.Measures))
			}
			a.Measures = nil
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("message %d %s:\nEvaluate %+v\nDecide   %+v", i, state, a, b)
			}
		}
	}
	if d := de.Evaluate(ctx, t0, eom("ann")); d.Action != policy.Defer {
		t.Fatalf("after 205 messages: %v, want defer", d.Action)
	}
}

// A domain's default: overrides "@example.org" applies to every user of
// the domain without an entry of its own (issue: per-domain defaults).
func TestDomainOverrides(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "hourly", Key: []string{"sasl_username"}, Limit: 2, Period: policy.Duration(time.Hour),
			Overrides: map[string]float64{"@Big.example": 5, "boss@big.example": 8}},
	}}
	e := newEngine(t, c)
	ctx := context.Background()
	admitted := func(user string) int {
		n := 0
		for range 12 {
			if e.Evaluate(ctx, t0, eom(user)).Action == policy.Pass {
				n++
			}
		}
		return n
	}
	for user, want := range map[string]int{"ann@big.example": 5, "boss@big.example": 8, "ann@small.example": 2, "ann": 2} {
		if got := admitted(user); got != want {
			t.Errorf("%s: %d admitted, want %d", user, got, want)
		}
	}
	kr, err := e.Lookup(ctx, t0, "bob@big.example")
	if err != nil || len(kr) != 0 {
		t.Fatalf("lookup: %v %v", kr, err)
	}
	e.Evaluate(ctx, t0, eom("bob@big.example"))
	if kr, _ := e.Lookup(ctx, t0, "bob@big.example"); len(kr) != 1 || kr[0].Max != 5 {
		t.Fatalf("rate show of a domain user: %+v, want max 5", kr)
	}
}

// MayFreeze: only a freeze limit of the request's front end whose key the
// request carries, and never for an exempt sender.
func TestMayFreeze(t *testing.T) {
	c := policy.Config{Exempt: policy.Exempt{Users: []string{"monitor"}}, Limits: []policy.LimitConfig{
		{Name: "f", Key: []string{"sasl_username", "recipient_domain"}, Limit: 1, Period: policy.Duration(time.Hour),
			Action: "freeze", Via: []string{policy.ViaMilter}},
		{Name: "d", Key: []string{"sender"}, Limit: 1, Period: policy.Duration(time.Hour)},
	}}
	e := newEngine(t, c)
	for _, tc := range []struct {
		req  policy.Request
		want bool
	}{
		{policy.Request{Stage: policy.ViaMilter, SASLUsername: "al", RecipientCount: 2}, true},
		{policy.Request{Stage: policy.ViaMilter, SASLUsername: "al"}, false},               // no recipient yet
		{policy.Request{Stage: policy.ViaMilter, Sender: "x@y", RecipientCount: 1}, false}, // no SASL user
		{policy.Request{Stage: policy.ViaPolicy, SASLUsername: "al", RecipientCount: 1}, false},
		{policy.Request{Stage: policy.ViaMilter, SASLUsername: "Monitor", RecipientCount: 1}, false}, // exempt
	} {
		if got := e.MayFreeze(&tc.req); got != tc.want {
			t.Errorf("MayFreeze(%+v) = %v, want %v", tc.req, got, tc.want)
		}
	}
}

// LimitParams gives the stores the limits as compiled: a baseline limit's
// cap is its Limit, and the engine's lookup agrees with the function.
func TestLimitParams(t *testing.T) {
	c := policy.Config{Limits: []policy.LimitConfig{
		{Name: "h", Key: []string{"sender"}, Limit: 5, Period: policy.Duration(time.Hour), Algorithm: "gcra"},
		{Name: "b", Key: []string{"sender"}, Period: policy.Duration(time.Hour), Algorithm: "baseline", Floor: 2, Cap: 50},
	}}
	m, err := policy.LimitParams(c)
	if err != nil {
		t.Fatal(err)
	}
	if m["h"].Algorithm != ratelimit.GCRA || m["h"].Limit != 5 || m["b"].Limit != 50 || m["b"].Floor != 2 {
		t.Fatalf("params %+v", m)
	}
	e := newEngine(t, c)
	if l, ok := e.LimitParams("b"); !ok || l != m["b"] {
		t.Fatalf("engine params %+v %v, want %+v", l, ok, m["b"])
	}
	if _, ok := e.LimitParams("nosuch"); ok {
		t.Fatal("unknown limit found")
	}
	c.Limits[0].Mode = "sloppy"
	if _, err := policy.LimitParams(c); !errors.Is(err, policy.ErrInvalidConfig) {
		t.Fatalf("invalid config: %v", err)
	}
}

// TestRefusalKeyIsOwnString checks that a refusal's Decision.Key does not
// share memory with the request's strings: mta/postfix.Decoder cuts them
// from 16 KiB blocks, and a refusal's key is kept for long (notification
// windows, quarantine alert counts), which would keep a whole block alive
// per key.
func TestRefusalKeyIsOwnString(t *testing.T) {
	e := newEngine(t, hourlyDaily())
	var d policy.Decision
	var req *policy.Request
	for i := 0; d.Action != policy.Defer; i++ {
		if i == 1000 {
			t.Fatal("1,000 messages in 1,000 s never deferred")
		}
		req = eom("alice")
		d = e.Evaluate(context.Background(), t0.Add(time.Duration(i)*time.Second), req)
	}
	if d.Key != "alice" {
		t.Fatalf("deferred with key %q, want alice", d.Key)
	}
	if unsafe.StringData(d.Key) == unsafe.StringData(req.SASLUsername) {
		t.Fatal("Decision.Key shares the request's SASLUsername bytes")
	}
}

// TestLocalUserKey: a limit keyed by local_user counts a local user's
// submissions under the uid whatever sender they give, and does not count
// SMTP mail, which has no local user.
func TestLocalUserKey(t *testing.T) {
	cfg := policy.Config{Limits: []policy.LimitConfig{
		{Name: "local", Key: []string{"local_user"}, Limit: 5, Period: policy.Duration(time.Hour), Action: "freeze"},
	}}
	eng, err := policy.NewEngine(cfg, ratestore.NewMemory(ratestore.MemoryOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	for i := range 10 {
		smtp := &policy.Request{ProtocolState: policy.StateEndOfMessage, Sender: "alice@example.org", RecipientCount: 1}
		if d := eng.Evaluate(context.Background(), now, smtp); d.Action != policy.Pass {
			t.Fatalf("SMTP message %d: %v, want pass (no local user)", i+1, d.Action)
		}
	}
	var actions []policy.Action
	for i := range 7 {
		req := &policy.Request{ProtocolState: policy.StateEndOfMessage, LocalUser: "1001", RecipientCount: 1,
			Sender: []string{"www-data@example.org", "someone-else@example.com"}[i%2]}
		d := eng.Evaluate(context.Background(), now, req)
		actions = append(actions, d.Action)
		if d.Action == policy.Freeze && d.Key != "1001" {
			t.Fatalf("key %q, want the uid 1001", d.Key)
		}
	}
	want := []policy.Action{policy.Pass, policy.Pass, policy.Pass, policy.Pass, policy.Pass, policy.Freeze, policy.Freeze}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("actions %v, want %v", actions, want)
		}
	}
}
