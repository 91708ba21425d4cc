package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/json")

// runCLI runs the command line as main does, with stdin, and returns the
// exit status, standard output and standard error.
func runCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := newRootCmd()
	var out, errb bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	return exitStatus(cmd.Execute(), &errb), out.String(), errb.String()
}

func TestExitStatusAndMessages(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[[limit]]\nname = \"x\"\nkey = [\"sasl_username\"\nlimit = 5\n"), 0o644)
	for _, tc := range []struct {
		args   []string
		status int
		want   []string // in stderr
		not    []string
	}{
		{[]string{"bogus"}, 2, []string{`unknown command "bogus" for "ratelimitd"`, "commands: "}, nil},
		{[]string{"qurantine"}, 2, []string{"did you mean quarantine?"}, nil},
		{[]string{"rate", "bogus"}, 2, []string{`unknown command "bogus" for "ratelimitd rate"`, "list, reset, show"}, nil},
		{[]string{"rate", "show"}, 2, []string{"accepts 1 arg(s), received 0", "usage: ratelimitd rate show KEY"}, nil},
		{[]string{"status", "--nope"}, 2, []string{"unknown flag: --nope"}, nil},
		{[]string{"--config", cfg, "quarantine", "thaw"}, 2, []string{"name the messages to thaw", "--sender ADDRESS, --key KEY"}, []string{"older-than"}},
		{[]string{"--config", cfg, "quarantine", "delete"}, 2, []string{"--sender ADDRESS, --key KEY, --older-than DURATION"}, nil},
		{[]string{"--config", cfg, "status"}, 1, []string{"ratelimitd is not running", "start it (systemctl start ratelimitd"}, nil},
		{[]string{"config", "check", bad}, 1, []string{bad + ":4:1: expected a comma", "configuration is not valid (1 problems)"}, []string{"config: ", "toml: "}},
		{[]string{"--config", filepath.Join(dir, "missing.toml"), "status"}, 1, []string{"no such file", "check the path"}, []string{"config: "}},
	} {
		status, _, stderr := runCLI(t, "", tc.args...)
		if status != tc.status {
			t.Errorf("%q: exit %d, want %d\n%s", tc.args, status, tc.status, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr lacks %q:\n%s", tc.args, w, stderr)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(stderr, w) {
				t.Errorf("%q: stderr has %q:\n%s", tc.args, w, stderr)
			}
		}
	}
	status, out, _ := runCLI(t, "", "--version")
	if status != 0 || !strings.HasPrefix(out, "ratelimitd ") || !strings.Contains(out, "go1.") {
		t.Errorf("--version: %d %q", status, out)
	}
}

// policyAsk sends one policy request with attrs (name=value) to addr
// (host:port, or unix:PATH) and returns the action line.
func policyAsk(t testing.TB, addr string, attrs ...string) string {
	t.Helper()
	return mtatest.PolicyAsk(t, addr, attrs...)
}

// sendPolicy is policyAsk with attrs as "name=value\n" lines.
func sendPolicy(t testing.TB, addr, attrs string) string {
	t.Helper()
	return mtatest.PolicyAsk(t, addr, strings.Split(strings.TrimSuffix(attrs, "\n"), "\n")...)
}

// operationsDaemon starts a daemon with a hold limit of 2 per hour and
// rates for alice, bob and holly@example.org, carol@example.net and dave;
// holly's messages 3 and 4 are held (queue IDs 3F2A1B4C5C and
// 3F2A1B4C5D, confirmed by a stand-in queue listing). cli runs the command
// line against it with stdin.
func operationsDaemon(t *testing.T) (td *testDaemon, cli func(stdin string, args ...string) (int, string, string)) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), `
[quarantine]
release_command = [["true", "{queue_id}"]]
delete_command = ["true", "{queue_id}"]
show_command = ["echo", "queue file {queue_id}"]
`+mtatest.FakeHeldQueue(t, dir, "holly@example.org", []string{"r@example.net"}, "3F2A1B4C5C", "3F2A1B4C5D", "3F2A1B4C5FF")+`

[[limit]]
name = "hourly"
key = "sasl_username"
limit = 2
period = "1h"
action = "hold"
via = ["policy"]
`)
	td = startTestDaemon(t, cfg)
	for _, u := range []string{"alice@example.org", "bob@example.org", "carol@example.net", "dave"} {
		policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sasl_username="+u, "sender="+u, "queue_id=3F2A1B4C5D")
	}
	for i := range 4 {
		ans := policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sasl_username=holly@example.org",
			"sender=holly@example.org", "recipient=r@example.net", fmt.Sprintf("queue_id=3F2A1B4C5%X", 10+i), fmt.Sprintf("instance=i%d", i))
		if held := strings.HasPrefix(ans, "action=HOLD"); held != (i >= 2) {
			t.Fatalf("holly message %d: %s", i+1, ans)
		}
	}
	return td, func(stdin string, args ...string) (int, string, string) {
		return runCLI(t, stdin, append([]string{"--config", cfg}, args...)...)
	}
}

// TestCLIOperations drives the operator commands against a running
// daemon: rate list --domain, delete confirmation, and the --json shapes
// (golden files in testdata/json; go test -run CLIOperations -update
// rewrites them).
func TestCLIOperations(t *testing.T) {
	td, cli := operationsDaemon(t)

	_, out, _ := cli("", "rate", "list", "--domain", "example.org")
	if !strings.Contains(out, "alice@example.org") || !strings.Contains(out, "bob@example.org") || !strings.Contains(out, "holly@example.org") ||
		strings.Contains(out, "carol") || strings.Contains(out, "dave") {
		t.Errorf("rate list --domain example.org:\n%s", out)
	}
	_, out, _ = cli("", "rate", "show", "holly@example.org")
	// Four messages, two of them held: held messages are admitted, so the
	// leaky limit counts all four.
	if f := strings.Fields(strings.Split(out, "\n")[1]); len(f) < 5 || f[2] != "4" || f[3] != "2" {
		t.Errorf("rate show: want holly's rate and max printed rounded: 4 and 2:\n%s", out)
	}
	if !strings.Contains(out, "\nnext message: held by hourly\n") {
		t.Errorf("rate show does not say which limit answers:\n%s", out)
	}

	// Two held messages: delete asks, and "n" or no answer deletes nothing.
	for _, stdin := range []string{"n\n", ""} {
		status, out, stderr := cli(stdin, "quarantine", "delete", "--key", "holly@example.org")
		if status != 1 || !strings.Contains(out, "Delete 2 messages? [y/N]") || !strings.Contains(stderr, "nothing deleted") {
			t.Fatalf("delete answered %q: %d\n%s%s", stdin, status, out, stderr)
		}
	}
	_, out, _ = cli("", "quarantine", "list", "--json")
	var entries []struct{ ID, State string }
	if err := json.Unmarshal([]byte(out), &entries); err != nil || len(entries) != 2 || entries[0].State != "held" {
		t.Fatalf("after refused deletes, want 2 held entries: %v\n%s", err, out)
	}
	first := entries[0]

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"status", []string{"status", "--json"}},
		{"rate-show", []string{"rate", "show", "--json", "holly@example.org"}},
		{"rate-list", []string{"rate", "list", "--json"}},
		{"config-check", []string{"config", "check", "--json"}},
		{"quarantine-show", []string{"quarantine", "show", "--json", first.ID}},
	} {
		status, out, stderr := cli("", tc.args...)
		if status != 0 {
			t.Errorf("%s: exit %d: %s", tc.name, status, stderr)
			continue
		}
		checkShape(t, tc.name, out)
	}

	status, out, stderr := cli("y\n", "quarantine", "delete", "--key", "holly@example.org")
	if status != 0 || !strings.Contains(out, "2 deleted, 0 failed") {
		t.Fatalf("delete confirmed with y: %d\n%s%s", status, out, stderr)
	}
	policyAsk(t, td.policyAddr, "protocol_state=END-OF-MESSAGE", "sasl_username=holly@example.org", "sender=holly@example.org", "queue_id=3F2A1B4C5FF")
	status, out, _ = cli("", "quarantine", "delete", "--yes", "--sender", "holly@example.org")
	if status != 0 || !strings.Contains(out, "1 deleted") || strings.Contains(out, "[y/N]") {
		t.Fatalf("delete --yes: %d\n%s", status, out)
	}
}

// checkShape compares the shape of a JSON document (keys and value types,
// arrays by their first element) with testdata/json/NAME.json.
func checkShape(t *testing.T, name, doc string) {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Errorf("%s: not JSON: %v\n%s", name, err, doc)
		return
	}
	got, _ := json.MarshalIndent(shape(v), "", "  ")
	got = append(got, '\n')
	path := filepath.Join("testdata", "json", name+".json")
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("%s: %v (run with -update to create it)", name, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s --json shape changed; got:\n%s\nwant (%s):\n%s\noutput was:\n%s", name, got, path, want, doc)
	}
}

func shape(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			out[k] = shape(x[k])
		}
		return out
	case []any:
		if len(x) == 0 {
			return []any{}
		}
		return []any{shape(x[0])}
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	}
	return "null"
}

// TestManPages: `ratelimitd man DIR` writes a section-8 page per command,
// from the commands' own help.
func TestManPages(t *testing.T) {
	dir := t.TempDir()
	if status, _, stderr := runCLI(t, "", "man", dir); status != 0 {
		t.Fatalf("man: %d %s", status, stderr)
	}
	for page, want := range map[string]string{
		"ratelimitd.8":                   "Exit status: 0 success, 1 error, 2 usage error",
		"ratelimitd-rate-list.8":         "\\fB--domain\\fP",
		"ratelimitd-quarantine-delete.8": "\\fB--yes\\fP",
		"ratelimitd-serve.8":             "SIGHUP",
	} {
		b, err := os.ReadFile(filepath.Join(dir, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		if !strings.Contains(string(b), `.TH "RATELIMITD" "8"`) || !strings.Contains(string(b), want) {
			t.Errorf("%s lacks the section-8 header or %q:\n%.400s", page, want, b)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "ratelimitd-man.8")); err == nil {
		t.Error("the hidden man command has a page")
	}
}

// TestThawSaysWhatItDid: thaw --reset-rate says whose rate it reset, and
// a thaw or delete whose selection matches no message exits 1 with "no
// message matches" (before: "0 thawed, 0 failed", exit 0).
func TestThawSaysWhatItDid(t *testing.T) {
	_, cli0 := operationsDaemon(t)
	cli := func(args ...string) (int, string, string) { return cli0("", args...) }
	for _, args := range [][]string{
		{"quarantine", "thaw", "--key", "nobody"},
		{"quarantine", "thaw", "--sender", "nobody@example.org", "--reset-rate"},
		{"quarantine", "delete", "--key", "nobody", "--yes"},
	} {
		status, out, stderr := cli(args...)
		if status != 1 || !strings.Contains(stderr, "no message matches --") || strings.Contains(out, "0 failed") {
			t.Errorf("%q: exit %d, want 1 and 'no message matches':\n%s%s", args, status, out, stderr)
		}
	}
	status, out, stderr := cli("quarantine", "thaw", "--key", "holly@example.org", "--reset-rate")
	if status != 0 || !strings.Contains(out, "2 thawed, 0 failed") || !strings.Contains(out, "holly@example.org: rate reset") {
		t.Fatalf("thaw --reset-rate: exit %d:\n%s%s", status, out, stderr)
	}
	if _, out, _ := cli("rate", "show", "holly@example.org"); strings.Contains(out, "hourly") {
		t.Errorf("rate not reset:\n%s", out)
	}
}

// TestJSONFlagsOneConvention: every command with a --json flag (found by
// walking the command tree, so a new one cannot be left out) prints one
// JSON document: an object for one thing, an array for a list, [] for an
// empty list (docs/operations.md). Before, quarantine list --json printed
// JSON Lines (nothing at all for no message) while rate list --json
// printed an array.
func TestJSONFlagsOneConvention(t *testing.T) {
	_, cli := operationsDaemon(t)
	_, out, _ := cli("", "quarantine", "list")
	id := strings.Fields(strings.Split(out, "\n")[1])[0]
	type run struct {
		args  []string
		array bool
	}
	runs := map[string][]run{
		"config check": {{[]string{"config", "check"}, false}},
		"status":       {{[]string{"status"}, false}},
		"rate show": {{[]string{"rate", "show", "holly@example.org"}, true},
			{[]string{"rate", "show", "nobody"}, true}},
		"rate list": {{[]string{"rate", "list"}, true},
			{[]string{"rate", "list", "--domain", "nowhere.example"}, true}},
		"quarantine list": {{[]string{"quarantine", "list"}, true}, {[]string{"quarantine", "list", "--key", "holly@example.org"}, true},
			{[]string{"quarantine", "list", "--key", "nobody"}, true}},
		"quarantine show": {{[]string{"quarantine", "show", id}, false}},
		"events": {{[]string{"events"}, true}, {[]string{"events", "--summary"}, true},
			{[]string{"events", "--key", "nobody"}, true}, {[]string{"events", "--summary", "--key", "nobody"}, true}},
	}
	found := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("json") != nil {
			found[strings.TrimPrefix(c.CommandPath(), "ratelimitd ")] = true
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	for path := range found {
		if _, ok := runs[path]; !ok {
			t.Errorf("%q has --json but this test does not run it: add it (one JSON document: docs/operations.md)", path)
		}
	}
	for path, rs := range runs {
		if !found[path] {
			t.Errorf("%q has no --json flag (any more?)", path)
		}
		for _, r := range rs {
			args := append(r.args, "--json")
			status, out, stderr := cli("", args...)
			if status != 0 {
				t.Errorf("%q: exit %d: %s", args, status, stderr)
				continue
			}
			dec := json.NewDecoder(strings.NewReader(out))
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Errorf("%q: not JSON: %v\n%s", args, err, out)
				continue
			}
			if err := dec.Decode(new(any)); err != io.EOF {
				t.Errorf("%q: more than one JSON document (JSON Lines?): %v\n%s", args, err, out)
			}
			switch v.(type) {
			case []any:
				if !r.array {
					t.Errorf("%q: an array, want an object:\n%s", args, out)
				}
			case map[string]any:
				if r.array {
					t.Errorf("%q: an object, want an array (a list):\n%s", args, out)
				}
			default:
				t.Errorf("%q: %T, want an object or an array (never null):\n%s", args, v, out)
			}
		}
	}
}
