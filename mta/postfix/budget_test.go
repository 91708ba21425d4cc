package postfix

import (
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// At the cap, idle connections and connections still reading a partial
// request give way to a new one, so neither silent nor slow clients can
// lock Postfix out; every one is counted.
func TestServerBudgetMakesRoom(t *testing.T) {
	const max = 4
	ts := startServer(t, &Server{Budget: srvconn.Budget{Max: max}}, nil)
	for round := range 3 {
		for i := range max {
			c := ts.dial(t)
			if i%2 == 0 {
				c.Write([]byte("request=smtpd_access_policy\nprotocol_state=RCPT\n")) // never ended
			}
		}
		c := ts.dial(t)
		if got := c.ask(t, request("alice")); got != "action=DUNNO" {
			t.Fatalf("round %d: a new connection at the cap: %q", round, got)
		}
		if got := c.ask(t, request("alice")); got != "action=DUNNO" {
			t.Fatalf("round %d: second request: %q", round, got)
		}
	}
	st := ts.ConnStats()
	if st.Max != max || st.Open > max || st.Closed[srvconn.ReasonEvicted] < 3*max+3-max {
		t.Fatalf("stats %+v; want at most %d open and at least %d evicted", st, max, 3*max+3-max)
	}
	if n := ts.metrics.get(func(m *testMetrics) int { return len(m.badInput) }); n != 0 {
		t.Fatalf("connections closed for room counted as bad input: %d reasons", n)
	}
}
