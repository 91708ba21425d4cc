package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"al.essio.dev/pkg/shellescape"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// ShellQuote returns s as exactly one argument of a POSIX sh command line
// (sh(1), "Quoting" in the POSIX Shell Command Language) that a
// postmaster can paste from a notification: s is data, never a command,
// whatever quotes, $(...), backquotes or semicolons it holds. Text
// without control characters is single-quoted by shellescape.Quote. Text
// with control, bidirectional-control or invalid UTF-8 bytes (which must
// not reach a mail body or a terminal) is written as
// "$(printf '%b' '...')" with those bytes as octal escapes (\0ooo), so the
// line stays printable and sh still rebuilds s byte for byte, except that
// command substitution drops line breaks at its very end (a canonical
// rate key never ends in one). Templates call it as {{shellquote .Key}}.
func ShellQuote(s string) string {
	if termsafe.Line(s) == s && !strings.ContainsAny(s, "\t") {
		return shellescape.Quote(s)
	}
	var b strings.Builder
	b.WriteString(`"$(printf '%b' '`)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1, termsafe.Unsafe(r), r == '\t':
			for _, c := range []byte(s[i : i+n]) {
				fmt.Fprintf(&b, `\0%03o`, c)
			}
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\'':
			b.WriteString(`'\''`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteString(`')"`)
	return b.String()
}
