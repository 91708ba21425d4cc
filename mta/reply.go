package mta

import (
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/policy"
)

// MaxTextLen is the longest reply text, in bytes: an SMTP reply line is at
// most 512 bytes with CRLF (RFC 5321 4.5.3.1.5), and "450 4.7.1 " takes
// the rest.
const MaxTextLen = 500

// ReplyText is the one sanitiser of text sent to an MTA: control
// characters (C0, DEL, C1, U+2028, U+2029) become spaces, invalid UTF-8
// U+FFFD, runs of spaces collapse, ends are trimmed, and the result is cut
// at a rune boundary to at most max bytes ("" if max < 1).
func ReplyText(s string, max int) string {
	if max < 1 {
		return ""
	}
	clean := !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r >= 0x7f })
	if clean && len(s) <= max && !strings.Contains(s, "  ") && strings.TrimSpace(s) == s {
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

// Texts of a Defer or Reject without one.
const (
	DeferText  = "Rate limit exceeded, try again later"
	RejectText = "Rate limit exceeded"
)

// Refusal returns the reply to a Reject (550 5.7.1 RejectText) or any
// other refusal (450 4.7.1 DeferText): d's Code, Enhanced and Text where
// valid for the class (RFC 5321 4.2, RFC 3463), else these defaults. The
// text is not yet made safe (ReplyText).
func Refusal(d *policy.Decision) (code int, enhanced, text string) {
	code, enhanced, text, class := 450, "4.7.1", DeferText, byte('4')
	if d.Action == policy.Reject {
		code, enhanced, text, class = 550, "5.7.1", RejectText, '5'
	}
	if d.Code/100 == int(class-'0') {
		code = d.Code
	}
	if ValidEnhanced(d.Enhanced, class) {
		enhanced = d.Enhanced
	}
	if ReplyText(d.Text, MaxTextLen) != "" {
		text = d.Text
	}
	return code, enhanced, text
}

// enhancedRE is an RFC 3463 enhanced status code: class.subject.detail.
var enhancedRE = regexp.MustCompile(`^[245]\.[0-9]{1,3}\.[0-9]{1,3}$`)

// ValidEnhanced reports whether s is an RFC 3463 enhanced status code
// "class.subject.detail" of the given class ('4' or '5'), subject and
// detail of one to three digits.
func ValidEnhanced(s string, class byte) bool {
	return s != "" && s[0] == class && enhancedRE.MatchString(s)
}

// HeaderField splits a Decision.Header "Name: value" at its first colon;
// ok only if Name is a valid field name (RFC 5322 3.6.8: printable ASCII
// but the colon, at least one character). value is not yet made safe.
func HeaderField(h string) (name, value string, ok bool) {
	name, value, ok = strings.Cut(h, ":")
	if !ok || name == "" || strings.ContainsFunc(name, func(r rune) bool { return r < '!' || r > '~' }) {
		return "", "", false
	}
	return name, value, true
}
