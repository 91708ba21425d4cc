package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheckPrintsLadders: config check prints the default stack's
// ladder in order and warns about a limit that never answers.
func TestConfigCheckPrintsLadders(t *testing.T) {
	out, err := cli(t, "config", "check")
	if err != nil {
		t.Fatal(err)
	}
	want := "\nladder sasl_username, per mail (the first limit over a request that answers decides):\n" +
		"  1. hourly defers above 200/h (leaky)\n  2. daily defers above 1,000/24h (strict)\n"
	if !strings.Contains(out, want) || strings.Contains(out, "warning: limit") {
		t.Fatalf("config check of the default:\n%s", out)
	}
	path := filepath.Join(t.TempDir(), "shadowed.toml")
	os.WriteFile(path, []byte(`
[[limit]]
name = "hourly"
key = "sasl_username"
limit = 5
period = "1h"
mode = "leaky"
action = "defer"

[[limit]]
name = "hold"
key = "sasl_username"
limit = 8
period = "1h"
mode = "strict"
action = "hold"
`), 0o600)
	out, err = cli(t, "config", "check", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"  2. hold holds above 8/h (strict; never answers: hourly refuses first)\n",
		"warning: limit hold can never answer: hourly, earlier over the same key and counting, defers above 5/h first\n",
	} {
		if !strings.Contains(out, w) {
			t.Fatalf("config check lacks %q:\n%s", w, out)
		}
	}
}
