package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/internal/cliout"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// hostileSASL is a sasl_username with OSC and CSI sequences, a C1 CSI and
// a right-to-left override: what a client can send (the policy protocol
// carries any byte but LF).
const hostileSASL = "\x1b]0;owned\x07\x1b[2Jmal\u009b6nlory\u202eexe.txt"

// noUnsafe fails if out carries a rune a terminal would act on.
func noUnsafe(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r != '\n' && r != '\t' && termsafe.Unsafe(r) {
			t.Fatalf("%s prints %U raw:\n%q", what, r, out)
		}
	}
}

// TestOperatorOutputSanitisedEverywhere: rate list, rate list --over,
// rate show and the argument rate show and rate reset echo printed a
// hostile key raw (OSC, CSI, C1, U+202E); every text output goes through
// one sanitiser now, while --json keeps the key exact.
func TestOperatorOutputSanitisedEverywhere(t *testing.T) {
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
	td := startTestDaemon(t, cfgPath)
	defer td.stop()
	for i := range 3 {
		sendPolicy(t, td.policyAddr, fmt.Sprintf("protocol_state=END-OF-MESSAGE\nsasl_username=%s\nsender=x@example.org\n"+
			"recipient=r@example.net\nrecipient_count=1\nclient_address=192.0.2.7\ninstance=hostile.%d\nsize=10\n", hostileSASL, i))
	}
	for _, args := range [][]string{
		{"rate", "list"}, {"rate", "list", "--over"}, {"rate", "show", hostileSASL}, {"rate", "show", hostileSASL + "nobody"},
		{"rate", "reset", hostileSASL + "nobody"}, {"status"}, {"events", "--since", "1h"}, {"events", "--since", "1h", "--summary"},
	} {
		out, err := cli(t, append([]string{"--config", cfgPath}, args...)...)
		what := strings.Join(args[:min(2, len(args))], " ")
		noUnsafe(t, what, out)
		if err != nil {
			noUnsafe(t, what+" error", cliout.ErrorMessage(err, DefaultConfigPath))
		}
	}
	out, err := cli(t, "--config", cfgPath, "rate", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	noUnsafe(t, "rate list --json", out)
	var rows []struct{ Key string }
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("rate list --json: %v\n%s", err, out)
	}
	found := false
	for _, r := range rows {
		found = found || r.Key == strings.ToLower(hostileSASL)
	}
	if !found {
		t.Fatalf("rate list --json lost the exact key:\n%s", out)
	}
}
