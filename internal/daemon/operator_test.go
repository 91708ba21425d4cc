package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// What an operator's command line asks the running daemon, over the admin
// socket as the CLI does, printed as the CLI prints it (internal/cliout).

// admin is a client of the daemon's admin socket.
func (td *testDaemon) admin() *admin.Client {
	return admin.NewClient(td.Config().Server.AdminSocket)
}

// statusText is `ratelimitd status`.
func (td *testDaemon) statusText() string {
	td.t.Helper()
	var b strings.Builder
	st := td.adminStatus()
	st.Print(&b)
	return b.String()
}

// rateShow is `ratelimitd rate show KEY`.
func (td *testDaemon) rateShow(key string) string {
	td.t.Helper()
	kr, err := td.admin().Rate(td.t.Context(), key)
	if err != nil {
		td.t.Fatalf("rate show %s: %v", key, err)
	}
	var b strings.Builder
	cliout.Rates(&b, kr)
	if line := admin.AnswerLine(kr); line != "" {
		fmt.Fprintf(&b, "next message: %s\n", line)
	}
	return b.String()
}

// rateOf is key's rate under limit (`rate show KEY`'s RATE column).
func (td *testDaemon) rateOf(key, limit string) float64 {
	td.t.Helper()
	kr, err := td.admin().Rate(td.t.Context(), key)
	if err != nil {
		td.t.Fatalf("rate show %s: %v", key, err)
	}
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
	kr, err := td.admin().Rates(td.t.Context(), 20, over)
	if err != nil {
		td.t.Fatalf("rate list: %v", err)
	}
	var b strings.Builder
	cliout.Rates(&b, kr)
	return b.String()
}

// listed lists the quarantine (key "": all pending entries).
func (td *testDaemon) listed(key string) []quarantine.Entry {
	td.t.Helper()
	es, err := td.admin().List(td.t.Context(), admin.ListQuery{Key: key})
	if err != nil {
		td.t.Fatalf("quarantine list: %v", err)
	}
	return es
}

// quarantineList is `ratelimitd quarantine list` of lq.
func (td *testDaemon) quarantineList(lq admin.ListQuery) string {
	td.t.Helper()
	es, err := td.admin().List(td.t.Context(), lq)
	if err != nil {
		td.t.Fatalf("quarantine list: %v", err)
	}
	var b strings.Builder
	cliout.Entries(&b, es)
	return b.String()
}

// show is `ratelimitd quarantine show ID`.
func (td *testDaemon) show(id string) string {
	td.t.Helper()
	res, err := td.admin().Show(td.t.Context(), id, false)
	if err != nil {
		td.t.Fatalf("quarantine show %s: %v", id, err)
	}
	var b strings.Builder
	cliout.Show(&b, res, false)
	return b.String()
}

// thaw is `ratelimitd quarantine thaw` of sel; err is the command's.
func (td *testDaemon) thaw(sel lifecycle.Selection) (string, error) {
	return td.act("thaw", sel, td.admin().Thaw)
}

// deleteEntries is `ratelimitd quarantine delete --yes` of sel.
func (td *testDaemon) deleteEntries(sel lifecycle.Selection) (string, error) {
	return td.act("delete", sel, td.admin().Delete)
}

func (td *testDaemon) act(op string, sel lifecycle.Selection, do func(context.Context, lifecycle.Selection) ([]lifecycle.Outcome, error)) (string, error) {
	outs, err := do(td.t.Context(), sel)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = cliout.Outcomes(&b, op, sel, outs)
	return b.String(), err
}

// eventList is `ratelimitd events` of q.
func (td *testDaemon) eventList(q events.Query) string {
	td.t.Helper()
	es, err := td.admin().EventList(td.t.Context(), q)
	if err != nil {
		td.t.Fatalf("events: %v", err)
	}
	var b strings.Builder
	cliout.Events(&b, es)
	return b.String()
}

// entriesText is es one per line, for failure messages.
func entriesText(es []quarantine.Entry) (s string) {
	for _, e := range es {
		s += fmt.Sprintf("%+v\n", e)
	}
	return s
}
