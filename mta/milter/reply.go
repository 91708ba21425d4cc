package milter

import (
	"strconv"
	"strings"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/mta"
)

// maxHeaderLine is the longest header line (without CRLF) AddHeader writes
// (RFC 5322, section 2.1.1).
const maxHeaderLine = 998

// reply returns an SMFIR_REPLYCODE "code enhanced text", text through
// mta.ReplyText and '%' doubled (Sendmail reads a format; milter8.c).
// enhanced must start with code's first digit (Postfix checks).
func reply(code int, enhanced, text string) gomilter.Response {
	r := strconv.Itoa(code) + " " + enhanced
	if text = mta.ReplyText(text, mta.MaxTextLen); text != "" {
		r += " " + strings.ReplaceAll(text, "%", "%%")
	}
	return gomilter.NewResponseStr(byte(gomilter.ActReplyCode), r)
}

// splitHeader splits a Decision.Header for AddHeader (mta.HeaderField): a
// name of at most 200 bytes, the value one line within 998 bytes.
func splitHeader(h string) (name, value string, ok bool) {
	name, value, ok = mta.HeaderField(h)
	if !ok || len(name) > 200 {
		return "", "", false
	}
	return name, mta.ReplyText(strings.TrimLeft(value, " \t"), maxHeaderLine-len(name)-2), true
}
