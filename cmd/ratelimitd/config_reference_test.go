package main

import (
	"os"
	"testing"
)

// TestConfigReferenceIsCommitted: `ratelimitd config reference` prints
// exactly the committed docs/configuration.md.
func TestConfigReferenceIsCommitted(t *testing.T) {
	status, out, stderr := runCLI(t, "", "config", "reference")
	if status != 0 {
		t.Fatalf("config reference: exit %d\n%s", status, stderr)
	}
	committed, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if out != string(committed) {
		t.Errorf("docs/configuration.md differs from the output of the command: run\n\tgo run ./cmd/ratelimitd config reference > docs/configuration.md")
	}
}
