package quarantine

import (
	"bytes"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // charsets beyond UTF-8/ASCII for RFC 2047 words and text parts
	"github.com/emersion/go-message/mail"
)

// maxHeaderBytes bounds how much of a message is read as its header.
const maxHeaderBytes = 1 << 20

// maxSubjectBytes bounds Entry.Subject (a header line may not exceed 998
// octets per RFC 5322 section 2.1.1; a decoded one may still be longer).
const maxSubjectBytes = 998

// readHeader parses the header of msg leniently: lines that are not
// "Key: value" fields (an mbox "From " line, garbage, a continuation line
// with nothing to continue) are skipped instead of failing the whole
// message, both LF and CRLF line ends are accepted, and at most
// maxHeaderBytes are read. It returns the header and the offset at which
// the body starts.
//
// go-message's textproto.ReadHeader stops at the first malformed line; a
// quarantine must still freeze, list and show such a message.
func readHeader(msg []byte) (message.Header, int) {
	type field struct {
		key   string
		value strings.Builder
	}
	var fields []*field
	var cur *field
	pos := 0
	for pos < len(msg) && pos < maxHeaderBytes {
		line := msg[pos:]
		next := len(msg)
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
			next = pos + i + 1
		}
		pos = next
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break // end of header
		}
		if line[0] == ' ' || line[0] == '\t' {
			if cur != nil {
				if v := bytes.TrimSpace(line); len(v) > 0 {
					if cur.value.Len() > 0 {
						cur.value.WriteByte(' ')
					}
					cur.value.Write(v)
				}
			}
			continue
		}
		cur = nil
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			continue
		}
		key := bytes.TrimRight(line[:colon], " \t")
		if len(key) == 0 || !validKey(key) {
			continue
		}
		cur = &field{key: string(key)}
		cur.value.Write(bytes.TrimSpace(line[colon+1:]))
		fields = append(fields, cur)
	}
	// message.Header.Add prepends, so add in reverse to keep the order.
	var h message.Header
	for i := len(fields) - 1; i >= 0; i-- {
		h.Add(fields[i].key, fields[i].value.String())
	}
	return h, pos
}

// validKey reports whether k is an RFC 5322 field name (printable ASCII
// except colon).
func validKey(k []byte) bool {
	for _, c := range k {
		if c < 33 || c > 126 {
			return false
		}
	}
	return true
}

// headerInfo returns the decoded Subject and the Message-ID of msg. It
// never fails: unparsable fields yield what can be salvaged or "".
func headerInfo(msg []byte) (subject, messageID string) {
	h, _ := readHeader(msg)
	mh := mail.Header{Header: h}
	subject, _ = mh.Subject() // on a decoding error: the raw value
	subject = truncate(cleanLine(subject), maxSubjectBytes)
	id, err := mh.MessageID()
	if err != nil || id == "" {
		id = strings.Trim(strings.TrimSpace(h.Get("Message-Id")), "<>")
	}
	messageID = truncate(cleanLine(id), maxSubjectBytes)
	return subject, messageID
}

// CleanLine returns s made safe to print on one line of an operator's
// terminal: valid UTF-8, tabs turned into spaces, every other control
// character (C0 including ESC and NUL, DEL, C1 including CSI U+009B) and
// line break replaced by U+FFFD, surrounding space trimmed. It is the one
// sanitizer for operator-facing output ("quarantine list", result lines
// of thaw and delete, Entry.WriteTo): envelope senders, subjects and MTA
// output are client data that could otherwise drive the terminal
// (terminal escape injection). It is safe for concurrent use.
func CleanLine(s string) string { return cleanLine(s) }

// CleanText is CleanLine for multi-line text (a message preview, the
// output of postcat): it keeps newlines and tabs, drops carriage returns
// and replaces every other control character by U+FFFD, and does not trim.
func CleanText(s string) string { return clean(s, true) }

// cleanLine makes s safe to print on one line: valid UTF-8, tabs turned
// into spaces, other control characters (C0, DEL, C1, including ESC) and
// line breaks replaced by U+FFFD, surrounding space trimmed.
func cleanLine(s string) string {
	return strings.TrimSpace(clean(s, false))
}

// clean is cleanLine without trimming; with multiline it keeps '\n' and
// tabs and drops '\r'.
func clean(s string, multiline bool) string {
	ok := utf8.ValidString(s)
	for _, r := range s {
		if unicode.IsControl(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '\n' && multiline:
			b.WriteRune(r)
		case r == '\t' && multiline:
			b.WriteRune(r)
		case r == '\t':
			b.WriteByte(' ')
		case r == '\r' && multiline:
		case unicode.IsControl(r):
			b.WriteRune('\uFFFD')
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
