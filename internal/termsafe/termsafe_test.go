package termsafe

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLine(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"alice@example.org", "alice@example.org"},
		{"\x1b]0;owned\x07evil", "\uFFFD]0;owned\uFFFDevil"},
		{"\x1b[2Jx\x9b6n", "\uFFFD[2Jx\uFFFD6n"},
		{"a\u0080b\u009bc", "a\uFFFDb\uFFFDc"},
		{"invoice\u202Efdp.exe", "invoice\uFFFDfdp.exe"},
		{"\u2066x\u2069\u200e\u200f\u061c", "\uFFFDx\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"line1\r\nline2", "line1\uFFFD\uFFFDline2"},
		{"bad\xffutf8", "bad\uFFFDutf8"},
		{"\ttabbed\t", "tabbed"},
		{"Bücher ✓", "Bücher ✓"},
		{"ali\u200bce\u200c\u200d@exa\u2060mple.org\ufeff", "ali\uFFFDce\uFFFD\uFFFD@exa\uFFFDmple.org\uFFFD"},
		{"ok\U000E0001\U000E0041\U000E007Fend", "ok\uFFFD\uFFFD\uFFFDend"},
		{"x\u200ax\u2061\U000E0080", "x\u200ax\u2061\U000E0080"}, // neighbours pass
	} {
		if got := Line(c.in); got != c.want {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := Text("a\r\nb\tc\x1b[0m\u202e"); got != "a\nb\tc\uFFFD[0m\uFFFD" {
		t.Errorf("Text = %q", got)
	}
}

// FuzzTermsafe checks that no unsafe rune survives, that the output is
// valid UTF-8, that cleaning is idempotent, and that nothing panics.
func FuzzTermsafe(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b]0;x\x07", "\u202e", "\xff\xfe", "a\r\nb", "\x9b6n", "\u200b\ufeff", "\U000E0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, fn := range map[string]func(string) string{"Line": Line, "Text": Text} {
			out := fn(s)
			if !utf8.ValidString(out) {
				t.Fatalf("%s(%q) = %q: invalid UTF-8", name, s, out)
			}
			for _, r := range out {
				if Unsafe(r) && !(name == "Text" && (r == '\n' || r == '\t')) {
					t.Fatalf("%s(%q) = %q keeps %U", name, s, out, r)
				}
			}
			if again := fn(out); again != out {
				t.Fatalf("%s not idempotent: %q -> %q", name, out, again)
			}
			if name == "Line" && strings.ContainsAny(out, "\r\n") {
				t.Fatalf("Line(%q) = %q has a line break", s, out)
			}
		}
	})
}

// TestWriterSplitWrites: text written in pieces that split UTF-8
// sequences and escape sequences comes out as Text of the whole, and safe
// text passes unchanged.
func TestWriterSplitWrites(t *testing.T) {
	in := "ok ✓ line\n\x1b]0;owned\x07 Bücher \u202eexe\r\ntail ✓"
	for size := 1; size <= len(in); size++ {
		var b strings.Builder
		w := NewWriter(&b)
		for i := 0; i < len(in); i += size {
			w.Write([]byte(in[i:min(i+size, len(in))]))
		}
		if got, want := b.String(), Text(in); got != want {
			t.Fatalf("writes of %d bytes: %q, want %q", size, got, want)
		}
	}
	var b strings.Builder
	NewWriter(&b).Write([]byte("plain ✓\ttext\n"))
	if b.String() != "plain ✓\ttext\n" {
		t.Fatalf("safe text changed: %q", b.String())
	}
}

// TestEscapeJSONInvisibles: zero-width and tag characters are escaped
// (tag characters as a UTF-16 surrogate pair), and the JSON value is the
// same.
func TestEscapeJSONInvisibles(t *testing.T) {
	in := "a\u200b\ufeffb\U000E0041c"
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	out := EscapeJSON(js)
	if want := `"a\u200b\ufeffb\udb40\udc41c"`; string(out) != want {
		t.Fatalf("EscapeJSON = %s, want %s", out, want)
	}
	var back string
	if err := json.Unmarshal(out, &back); err != nil || back != in {
		t.Fatalf("decoded %q, %v; want %q", back, err, in)
	}
}
