package quarantine

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // charsets beyond UTF-8/ASCII for RFC 2047 words and text parts
	"github.com/emersion/go-message/mail"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// maxHeaderBytes bounds how much of a message is read as its header.
const maxHeaderBytes = 1 << 20

// maxSubjectBytes bounds Entry.Subject and MessageID (RFC 5322 2.1.1).
const maxSubjectBytes = 998

// readHeader parses msg's header leniently (non-field lines skipped, LF
// or CRLF); it returns the header and body offset.
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

// validKey reports whether k is an RFC 5322 field name.
func validKey(k []byte) bool {
	return bytes.IndexFunc(k, func(r rune) bool { return r < 33 || r > 126 }) < 0
}

// HeaderInfo returns msg's decoded Subject and Message-ID (no <>),
// cleaned and bounded; "" if unparsable.
func HeaderInfo(msg []byte) (subject, messageID string) {
	h, _ := readHeader(msg)
	mh := mail.Header{Header: h}
	subject, _ = mh.Subject() // on a decoding error: the raw value
	id, err := mh.MessageID()
	if err != nil || id == "" {
		id = strings.Trim(strings.TrimSpace(h.Get("Message-Id")), "<>")
	}
	return truncate(termsafe.Line(subject), maxSubjectBytes), truncate(termsafe.Line(id), maxSubjectBytes)
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
