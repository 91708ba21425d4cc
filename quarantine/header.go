package quarantine

import (
	"bytes"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"strings"
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

// HeaderInfo returns the decoded Subject and the Message-ID (without angle
// brackets) of the message msg, or of its header alone, cleaned for
// printing (CleanLine) and bounded. It never fails: unparsable fields
// yield what can be salvaged or "".
func HeaderInfo(msg []byte) (subject, messageID string) { return headerInfo(msg) }

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
// terminal (termsafe.Line): valid UTF-8, tabs turned into spaces, every
// other control character (C0 including ESC and NUL, DEL, C1 including
// CSI U+009B), bidirectional control (U+202A-U+202E, U+2066-U+2069, ...)
// and line break replaced by U+FFFD, surrounding space trimmed. Envelope
// senders, subjects and MTA output are client data that could otherwise
// drive the terminal. It is safe for concurrent use.
func CleanLine(s string) string { return termsafe.Line(s) }

// CleanText is CleanLine for multi-line text (a message preview, the
// output of postcat): termsafe.Text keeps newlines and tabs, drops
// carriage returns and replaces every other unsafe rune by U+FFFD.
func CleanText(s string) string { return termsafe.Text(s) }

// cleanLine is CleanLine.
func cleanLine(s string) string { return termsafe.Line(s) }

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

// clean is termsafe.Text with multiline, termsafe.Line without trimming
// otherwise.
func clean(s string, multiline bool) string {
	if multiline {
		return termsafe.Text(s)
	}
	return termsafe.Line(s)
}
