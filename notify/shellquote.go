package notify

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"al.essio.dev/pkg/shellescape"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// ShellQuote returns s as exactly one POSIX sh argument (POSIX Shell
// Command Language, "Quoting"): single-quoted, or with unsafe runes
// "$(printf '%b' '...')" of octal escapes. Templates: {{shellquote .Key}}.
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
