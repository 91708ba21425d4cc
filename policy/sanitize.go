package policy

import (
	"strings"
	"unicode/utf8"
)

// MaxTextLen is the longest client text, in bytes, the engine produces: an
// SMTP reply line is at most 512 bytes with CRLF (RFC 5321 4.5.3.1.5), and
// "450 4.7.1 " takes the rest.
const MaxTextLen = 500

// SanitizeText makes s safe to put in an MTA reply: control characters (CR,
// LF, NUL, TAB, DEL, ...) become spaces, invalid UTF-8 becomes U+FFFD, runs
// of spaces collapse, and the result is cut at a rune boundary to at most
// max bytes. It never returns a string that can break the Postfix policy
// protocol or an SMTP reply.
func SanitizeText(s string, max int) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean && len(s) <= max && !strings.Contains(s, "  ") {
		return s
	}
	var b strings.Builder
	b.Grow(min(len(s), max))
	space := false
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		if r == ' ' {
			if space {
				continue
			}
			space = true
		} else {
			space = false
		}
		if b.Len()+utf8.RuneLen(r) > max {
			break
		}
		b.WriteRune(r)
	}
	return strings.TrimSpace(b.String())
}
