package config_test

import (
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/config"
)

const oneLimit = `
[[limit]]
name = "hourly"
key = "sasl_username"
limit = 200
period = "1h"
`

// TestRefusesNegativeDurations: a negative timeout or interval anywhere in
// the file is refused with its key (it was taken as is: a negative
// idle_timeout closed every connection at once).
func TestRefusesNegativeDurations(t *testing.T) {
	_, err := config.Parse([]byte(`
[server]
idle_timeout = "-5s"
request_timeout = "-1s"
[milter]
read_timeout = "-1m"
`+oneLimit), "neg.toml")
	if err == nil {
		t.Fatal("negative timeouts accepted")
	}
	for _, want := range []string{"server.idle_timeout: must not be negative", "server.request_timeout: must not be negative",
		"milter.read_timeout: must not be negative"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// TestRefusesAbsurdLimits: periods and limits outside the documented
// ranges, and a per-message limit under one message, are refused.
func TestRefusesAbsurdLimits(t *testing.T) {
	for _, c := range []struct{ limit, want string }{
		{`limit = 200` + "\n" + `period = "500ms"`, "period: 500ms is outside the accepted range 1s to 366d"},
		{`limit = 200` + "\n" + `period = "400d"`, "period: 400d is outside the accepted range"},
		{`limit = 1e300` + "\n" + `period = "1h"`, "limit: 1e+300 is above the accepted maximum 1e+15"},
		{`limit = 0.5` + "\n" + `period = "1h"`, "limit: 0.5 is below the cost of one mail (1): every request would be refused"},
	} {
		_, err := config.Parse([]byte("[[limit]]\nname = \"x\"\nkey = \"sasl_username\"\n"+c.limit+"\n"), "abs.toml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.limit, err, c.want)
		}
	}
	// Bytes may be fractional per period; the ranges' edges are accepted.
	if _, err := config.Parse([]byte("[[limit]]\nname = \"x\"\nkey = \"sasl_username\"\nper = \"byte\"\nlimit = 0.5\nperiod = \"1s\"\n"+
		"[[limit]]\nname = \"y\"\nkey = \"sasl_username\"\nlimit = 1e15\nperiod = \"366d\"\n"), "edge.toml"); err != nil {
		t.Fatalf("edges refused: %v", err)
	}
}

// TestWarnsAboutSettingsThatDoNothing: a limit no front end reaches, a
// freeze that can only hold, a max_keys the table rounds.
func TestWarnsAboutSettingsThatDoNothing(t *testing.T) {
	f, err := config.Parse([]byte(`
[server]
max_keys = 1000
[[limit]]
name = "milteronly"
key = "sasl_username"
limit = 10
period = "1h"
via = ["milter"]
[[limit]]
name = "freezer"
key = "sasl_username"
limit = 10
period = "1h"
action = "freeze"
`), "warn.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(f.Warnings(), "\n")
	for _, want := range []string{"limit milteronly is never applied", "limit freezer never freezes",
		"server.max_keys = 1000 is used as 960"} {
		if !strings.Contains(got, want) {
			t.Errorf("warnings lack %q:\n%s", want, got)
		}
	}
	f, _ = config.Parse([]byte(oneLimit), "ok.toml")
	if w := f.Warnings(); len(w) != 0 {
		t.Errorf("warnings for a plain file: %q", w)
	}
}
