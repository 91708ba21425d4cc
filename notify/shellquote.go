package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"al.essio.dev/pkg/shellescape"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// ShellQuote returns s as exactly one argument of a POSIX sh command line
// (POSIX Shell Command Language, "Quoting"), data never a command.
// Printable text is single-quoted (shellescape.Quote); text with unsafe
// runes (termsafe.Unsafe), tabs or invalid UTF-8 becomes
// "$(printf '%b' '...')" with those bytes as octal escapes, printable and
// rebuilt byte for byte but for trailing line breaks. Templates call it as
// {{shellquote .Key}}.
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
