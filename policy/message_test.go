package policy

import (
	"strings"
	"testing"
)

// TestAppendLower checks appendLower against strings.ToLower, after a
// prefix, for ASCII and non-ASCII input.
func TestAppendLower(t *testing.T) {
	for _, s := range []string{"", "alice", "Alice@Example.ORG", "ÄLICE@example.org", "bob.Ü@x", "x\xffY", strings.Repeat("AbC", 200)} {
		got := string(appendLower([]byte("pre\x00"), s))
		if want := "pre\x00" + strings.ToLower(s); got != want {
			t.Errorf("appendLower(%q) = %q, want %q", s, got, want)
		}
	}
}
