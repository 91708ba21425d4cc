package config_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/config"
)

func TestQuarantineDefaultsAndCommands(t *testing.T) {
	f, err := config.Load("")
	if err != nil {
		t.Fatal(err)
	}
	q := f.Quarantine
	want := config.Commands{{"postsuper", "-H", "{queue_id}"}, {"postqueue", "-i", "{queue_id}"}}
	if !slices.EqualFunc(q.ReleaseCommand, want, slices.Equal) {
		t.Fatalf("default release_command %q, want %q", q.ReleaseCommand, want)
	}
	if q.ExpireAction != "bounce" || len(q.ExpireCommand) != 2 || q.ExpireCommand[0][1] != "-f" {
		t.Fatalf("expiry defaults: %q %q", q.ExpireAction, q.ExpireCommand)
	}
	base := "[[limit]]\nname = \"h\"\nkey = [\"sasl_username\"]\nlimit = 10\nperiod = \"1h\"\naction = %q\nauto_release = %q\n[quarantine]\n%s\n"
	for _, c := range []struct {
		action, auto, quarantine, err string
	}{
		{"hold", "drip", `release_command = ["exim", "-Mt", "{queue_id}"]`, ""},
		{"freeze", "none", `release_command = [["postsuper", "-H", "{queue_id}"], ["postqueue", "-i", "{queue_id}"]]`, ""},
		{"defer", "drip", "", "auto_release"},
		{"hold", "sometimes", "", "auto_release"},
		{"hold", "", `expire_action = "shred"`, "expire_action"},
		{"hold", "", `release_command = [["postsuper", "-H"]]`, "release_command"},
		{"hold", "", `release_command = ["postsuper", ["-H", "{queue_id}"]]`, "release_command"},
	} {
		f, err := config.Parse([]byte(fmt.Sprintf(base, c.action, c.auto, c.quarantine)), "test.toml")
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%+v: %v", c, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%+v: error %v, want one naming %s", c, err, c.err)
		case c.err == "" && c.quarantine != "" && strings.HasPrefix(c.quarantine, "release_command = [\"exim") && len(f.Quarantine.ReleaseCommand) != 1:
			t.Errorf("one command decoded as %q", f.Quarantine.ReleaseCommand)
		}
	}
}
