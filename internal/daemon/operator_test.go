package daemon

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// What an operator's command line asks the running daemon, over the admin
// socket as the CLI does, printed as the CLI prints it (internal/cliout).

// admin is a client of the daemon's admin socket.
func (td *testDaemon) admin() *admin.Client {
	return admin.NewClient(td.cfg.Server.AdminSocket)
}

// asked is what get answers (what names the command for a failure).
func asked[T any](td *testDaemon, what string, get func(context.Context) (T, error)) T {
	td.t.Helper()
	v, err := get(td.t.Context())
	if err != nil {
		td.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// printed is v as print writes it.
func printed[T any](v T, print func(io.Writer, T)) string {
	var b strings.Builder
	print(&b, v)
	return b.String()
}

// statusText is `ratelimitd status`.
func (td *testDaemon) statusText() string {
	td.t.Helper()
	st := td.adminStatus()
	return printed(&st, func(w io.Writer, st *admin.Status) { st.Print(w) })
}

// rateShow is `ratelimitd rate show KEY`.
func (td *testDaemon) rateShow(key string) string {
	td.t.Helper()
	kr := td.rates(key)
	out := printed(kr, cliout.Rates)
	if line := admin.AnswerLine(kr); line != "" {
		out += fmt.Sprintf("next message: %s\n", line)
	}
	return out
}

// rates is key's rates under each limit.
func (td *testDaemon) rates(key string) []policy.KeyRate {
	td.t.Helper()
	return asked(td, "rate show "+key, func(ctx context.Context) ([]policy.KeyRate, error) { return td.admin().Rate(ctx, key) })
}

// rateOf is key's rate under limit (`rate show KEY`'s RATE column).
func (td *testDaemon) rateOf(key, limit string) float64 {
	td.t.Helper()
	kr := td.rates(key)
	for _, r := range kr {
		if r.Limit == limit {
			return r.Rate
		}
	}
	td.t.Fatalf("rate show %s: no rate under %s: %+v", key, limit, kr)
	return 0
}

// rateList is `ratelimitd rate list [--over]` (top 20).
func (td *testDaemon) rateList(over bool) string {
	td.t.Helper()
	return printed(asked(td, "rate list", func(ctx context.Context) ([]policy.KeyRate, error) { return td.admin().Rates(ctx, 20, over) }), cliout.Rates)
}

// listed lists the quarantine (key "": all pending entries).
func (td *testDaemon) listed(key string) []quarantine.Entry {
	td.t.Helper()
	return asked(td, "quarantine list", func(ctx context.Context) ([]quarantine.Entry, error) {
		return td.admin().List(ctx, admin.ListQuery{Key: key})
	})
}

// quarantineList is `ratelimitd quarantine list` of lq.
func (td *testDaemon) quarantineList(lq admin.ListQuery) string {
	td.t.Helper()
	return printed(asked(td, "quarantine list", func(ctx context.Context) ([]quarantine.Entry, error) { return td.admin().List(ctx, lq) }), cliout.Entries)
}

// show is `ratelimitd quarantine show ID`.
func (td *testDaemon) show(id string) string {
	td.t.Helper()
	res := asked(td, "quarantine show "+id, func(ctx context.Context) (admin.ShowResult, error) { return td.admin().Show(ctx, id, false) })
	return printed(res, func(w io.Writer, res admin.ShowResult) { cliout.Show(w, res, false) })
}

// thaw is `ratelimitd quarantine thaw` of sel; err is the command's.
func (td *testDaemon) thaw(sel lifecycle.Selection) (string, error) {
	return td.act("thaw", sel)
}

// deleteEntries is `ratelimitd quarantine delete --yes` of sel.
func (td *testDaemon) deleteEntries(sel lifecycle.Selection) (string, error) {
	return td.act("delete", sel)
}

func (td *testDaemon) act(op string, sel lifecycle.Selection) (string, error) {
	outs, err := td.admin().Act(td.t.Context(), op == "thaw", sel)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = cliout.Outcomes(&b, op, sel, outs)
	return b.String(), err
}

// eventList is `ratelimitd events` of q.
func (td *testDaemon) eventList(q events.Query) []events.Event {
	td.t.Helper()
	return asked(td, "events", func(ctx context.Context) ([]events.Event, error) { return td.admin().EventList(ctx, q) })
}

// openRates opens the rate state of the configuration at path as the rate
// commands do with no daemon running (read-only); the caller closes it.
func openRates(t *testing.T, path string) *admin.Local {
	t.Helper()
	f, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := OpenRates(f, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// entriesText is es one per line, for failure messages.
func entriesText(es []quarantine.Entry) (s string) {
	for _, e := range es {
		s += fmt.Sprintf("%+v\n", e)
	}
	return s
}
