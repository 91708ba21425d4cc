package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeFatalErrorInLogFile checks that serve, refusing to start,
// writes its reason to --log-file as well as standard error and exits 1:
// a daemon started in the background has no standard error. A broken
// configuration and a state file that is not a BoltDB file each stop it.
func TestServeFatalErrorInLogFile(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "ratelimitd.db"), []byte("not a database"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := "[server]\npolicy_listen = [\"unix:" + filepath.Join(dir, "policy.sock") + "\"]\nmetrics_listen = \"\"\nstate_dir = \"" + state +
		"\"\n[[limit]]\nname = \"h\"\nkey = [\"sasl_username\"]\nlimit = 5\nperiod = \"1h\"\n"
	for name, c := range map[string]struct{ conf, want string }{
		"config": {"[server]\ncolour = \"blue\"\n", "unknown key server.colour"},
		"state":  {good, "damaged state file"},
	} {
		path := filepath.Join(dir, name+".toml")
		if err := os.WriteFile(path, []byte(c.conf), 0o644); err != nil {
			t.Fatal(err)
		}
		logPath := filepath.Join(dir, name+".log")
		var stdout, stderr bytes.Buffer
		code := run([]string{"serve", "--config", path, "--log-file", logPath}, &stdout, &stderr)
		log, _ := os.ReadFile(logPath)
		if code != 1 || !strings.Contains(stderr.String(), c.want) || !strings.Contains(string(log), "level=ERROR") || !strings.Contains(string(log), c.want) {
			t.Errorf("%s: exit %d, want 1 and %q on stderr and in the log file\nstderr: %s\nlog: %s", name, code, c.want, stderr.String(), log)
		}
	}
}
