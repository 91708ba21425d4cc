package web

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

type fakeRates struct {
	mu     sync.Mutex
	rates  []policy.KeyRate
	resets []string
}

func (f *fakeRates) Lookup(_ context.Context, _ time.Time, key string) ([]policy.KeyRate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []policy.KeyRate
	for _, r := range f.rates {
		if r.Key == key {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeRates) All(context.Context, time.Time) ([]policy.KeyRate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]policy.KeyRate(nil), f.rates...), nil
}

func (f *fakeRates) Reset(_ context.Context, key, limit string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets = append(f.resets, key+"/"+limit)
	return 1, nil
}

type fakeQuarantine struct {
	mu      sync.Mutex
	entries map[string]quarantine.Entry
	msgs    map[string][]byte
	thawed  []lifecycle.Selection
	deleted []lifecycle.Selection
}

func (f *fakeQuarantine) List(flt quarantine.Filter) ([]quarantine.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []quarantine.Entry
	for _, e := range f.entries {
		if flt.Key != "" && e.Key != flt.Key {
			continue
		}
		if flt.Sender != "" && !strings.EqualFold(flt.Sender, e.Sender) {
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, nil
}

func (f *fakeQuarantine) Show(_ context.Context, id string, _ bool) (quarantine.Entry, []byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.entries[id]
	if !ok {
		return e, nil, quarantine.ErrNotFound
	}
	return e, f.msgs[id], nil
}

func (f *fakeQuarantine) Thaw(_ context.Context, sel lifecycle.Selection) ([]lifecycle.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.thawed = append(f.thawed, sel)
	return []lifecycle.Outcome{{ID: sel.IDs[0], OK: true}}, nil
}

func (f *fakeQuarantine) Delete(_ context.Context, sel lifecycle.Selection) ([]lifecycle.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, sel)
	return []lifecycle.Outcome{{ID: sel.IDs[0], OK: true}}, nil
}

func (f *fakeQuarantine) Suspend(key, by string, resume bool) (bool, error) { return resume, nil }
func (f *fakeQuarantine) Health() lifecycle.Health                          { return lifecycle.Health{Held: len(f.entries)} }

// newEventLog opens a real event log in a temporary BoltDB file.
func newEventLog(t *testing.T, now func() time.Time) *events.Log {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "events.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := events.Open(db, events.Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); db.Close() })
	return l
}

// testLimits are a stack with each kind of key a domain scope decides.
var testLimits = []policy.LimitInfo{
	{Name: "per-user", Key: []string{"sasl_username"}},
	{Name: "per-sender", Key: []string{"sender"}},
	{Name: "per-domain", Key: []string{"sender_domain"}},
	{Name: "per-client", Key: []string{"client_address"}},
	{Name: "user-client", Key: []string{"client_address", "sasl_username"}},
	{Name: "per-rcpt", Key: []string{"recipient"}},
}

// domainFixture is newFixture with a domain operator "dom" of example.org
// and, for alice@example.org, bob@example.net and the client 192.0.2.1:
// rates at their limits, refusals in the last hour, and held or frozen
// messages.
func domainFixture(t *testing.T) *fixture {
	f := newFixture(t, false)
	f.srv.opts.Services.Limits = func() []policy.LimitInfo { return testLimits }
	u, err := LoadUsers(f.srv.opts.UsersFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Set("dom", Operator, []byte("secret-password"), "example.org"); err != nil {
		t.Fatal(err)
	}
	if err := u.Save(f.srv.opts.UsersFile); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct{ limit, key string }{{"per-user", "alice@example.org"}, {"per-user", "bob@example.net"}, {"per-client", "192.0.2.1"}} {
		f.rates.rates = append(f.rates.rates, policy.KeyRate{Limit: k.limit, Key: k.key, Rate: 10, Max: 10, Period: time.Hour, Over: true, Refusing: true})
		for i := range 3 {
			f.events.Record(events.Event{Time: f.now.Add(time.Duration(i-30) * time.Minute), Key: k.key, Limit: k.limit, Action: "defer", Count: 1, Sender: "x@example.com"})
		}
	}
	for id, e := range map[string]quarantine.Entry{
		"00000000000000a1": {State: quarantine.Held, Key: "alice@example.org", Limit: "per-user", Sender: "alice@example.org", SASLUsername: "alice@example.org"},
		"00000000000000a2": {State: quarantine.Frozen, Key: "192.0.2.1", Limit: "per-client", Sender: "noreply@other.example", SASLUsername: "alice@example.org"},
		"00000000000000b1": {State: quarantine.Frozen, Key: "bob@example.net", Limit: "per-user", Sender: "bob@example.net", SASLUsername: "bob@example.net"},
	} {
		e.ID, e.Created = id, f.now.Add(-time.Minute)
		f.q.entries[id] = e
	}
	return f
}
