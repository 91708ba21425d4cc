package termsafe

import (
	"fmt"
	"strings"
	"testing"
)

// TestTable: columns two spaces apart, cells cleaned but not trimmed,
// trailing empty cells dropped, and a row past the sample widens its
// column from there on.
func TestTable(t *testing.T) {
	var b strings.Builder
	tb := NewTable(&b, "KEY", "N", "NOTE")
	tb.Row("  a\x1b[2J", "1", "")
	tb.Row("bbbb", "22", "x")
	if err := tb.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "KEY      N   NOTE\n  a\uFFFD[2J  1\nbbbb     22  x\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}

	b.Reset()
	tb = NewTable(&b, "K", "V")
	for i := range tableSample + 1 {
		tb.Row(fmt.Sprint(i%10), "v")
	}
	tb.Row("wide-key", "v")
	tb.Flush()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if got := lines[len(lines)-1]; got != "wide-key  v" {
		t.Errorf("row after the sample: %q", got)
	}
	if got := lines[1]; got != "0  v" {
		t.Errorf("row in the sample: %q", got)
	}
}
