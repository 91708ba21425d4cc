package quarantine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // charsets beyond UTF-8/ASCII for RFC 2047 words and text parts
	"github.com/emersion/go-message/mail"
	"golang.org/x/net/html"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

const (
	// DefaultPreviewBytes is PreviewMessage's text size if maxBytes <= 0.
	DefaultPreviewBytes = 4096
	// MaxMIMENesting is the deepest multipart nesting parsed (Postfix's
	// mime_nesting_limit default, postconf(5)); deeper parts are opaque.
	MaxMIMENesting = 100

	maxPreviewHeaders = 500
	maxPreviewParts   = 1000
)

var errTooManyParts = errors.New("too many parts")

// HeaderField is one decoded header field.
type HeaderField struct {
	Key   string // canonical form, e.g. "Message-Id"
	Value string // RFC 2047 decoded, unfolded, control characters replaced
}

// Part describes one MIME part of a message.
type Part struct {
	Path        string // IMAP section number ("1", "2.1"); "" for a multipart root
	Depth       int    // nesting level, 0 for the root
	ContentType string // media type, lower case; "" if absent or unparsable
	Charset     string
	Disposition string // "inline", "attachment" or ""
	Filename    string // decoded (RFC 2231, RFC 2047)
	// Size is the decoded size in bytes; 0 for multipart containers.
	Size int64
	// Err describes a problem with the part, read as well as possible.
	Err string
}

// Preview is what "quarantine show" displays of a message.
type Preview struct {
	Header []HeaderField
	Parts  []Part
	// Text starts the first inline text/plain part, else text/html
	// untagged; TextPath, TextType name it.
	Text      string
	TextPath  string
	TextType  string
	Truncated bool
	// PartsOmitted says the message has more parts than Parts lists.
	PartsOmitted bool
}

// PreviewMessage parses msg (RFC 5322, CRLF or LF) leniently into header
// fields, MIME parts and up to maxBytes (<= 0: DefaultPreviewBytes) of
// text; on error it returns what it read. The Preview is never nil.
func PreviewMessage(ctx context.Context, msg []byte, maxBytes int) (*Preview, error) {
	maxBytes = cmp.Or(max(maxBytes, 0), DefaultPreviewBytes)
	h, bodyStart := readHeader(msg)
	p := &Preview{}
	for f := h.Fields(); f.Next() && len(p.Header) < maxPreviewHeaders; {
		v, _ := f.Text() // on a decoding error: the raw value
		p.Header = append(p.Header, HeaderField{Key: termsafe.Line(f.Key()), Value: termsafe.Line(v)})
	}

	// Charset or encoding errors: the root's from New, others' from Walk.
	ent, rootErr := message.New(h, bytes.NewReader(msg[bodyStart:]))
	if ent == nil {
		return p, fmt.Errorf("quarantine: preview: %w", rootErr)
	}
	var plain, htm *capture
	walkErr := walkParts(ent, func(path []int, part *message.Entity, err error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(p.Parts) >= maxPreviewParts {
			p.PartsOmitted = true
			return errTooManyParts
		}
		mt, params, _ := part.Header.ContentType()
		pt := Part{Path: sectionPath(path, part), Depth: len(path), ContentType: strings.ToLower(mt),
			Charset: params["charset"]}
		if len(path) == 0 {
			err = rootErr
		}
		if err != nil {
			pt.Err = err.Error()
		}
		if disp, _, derr := part.Header.ContentDisposition(); derr == nil {
			pt.Disposition = strings.ToLower(disp)
		}
		fn, _ := (&mail.AttachmentHeader{Header: part.Header}).Filename() // RFC 2231 and 2047 decoded
		pt.Filename = termsafe.Line(fn)
		if part.MultipartReader() != nil {
			if len(path) >= MaxMIMENesting {
				pt.Err = fmt.Sprintf("nested deeper than %d levels (Postfix's mime_nesting_limit): not parsed", MaxMIMENesting)
			}
			p.Parts = append(p.Parts, pt)
			return nil
		}
		var w io.Writer = io.Discard
		// Text for the preview: a part not marked (or named) as an attachment.
		if (pt.Disposition != "attachment" && pt.Filename == "") || pt.Disposition == "inline" {
			switch {
			case plain == nil && (pt.ContentType == "text/plain" || pt.ContentType == ""):
				plain = &capture{limit: maxBytes + 1, path: pt.Path, typ: "text/plain"}
				w = plain
			case htm == nil && pt.ContentType == "text/html":
				// Tags take room: keep more, strip, then cut.
				htm = &capture{limit: 8*maxBytes + 1, path: pt.Path, typ: "text/html"}
				w = htm
			}
		}
		n, rerr := io.Copy(w, part.Body)
		pt.Size = n
		if rerr != nil {
			pt.Err = strings.TrimPrefix(pt.Err+"; reading body: "+rerr.Error(), "; ")
		}
		p.Parts = append(p.Parts, pt)
		return nil
	})

	if c := cmp.Or(plain, htm); c != nil {
		p.Text, p.Truncated = c.text(maxBytes)
		p.TextPath, p.TextType = c.path, c.typ
	}
	switch {
	case walkErr == nil, errors.Is(walkErr, errTooManyParts):
		return p, nil
	case ctx.Err() != nil:
		return p, fmt.Errorf("quarantine: preview: %w", walkErr)
	}
	return p, fmt.Errorf("quarantine: preview: malformed MIME structure: %w", walkErr)
}

// walkParts is Entity.Walk stopping at MaxMIMENesting.
func walkParts(e *message.Entity, fn message.WalkFunc) error {
	var readers []message.MultipartReader
	var path []int
	part := e
	for {
		var err error
		if part == nil {
			if len(readers) == 0 {
				return nil
			}
			part, err = readers[len(readers)-1].NextPart()
			if err == io.EOF {
				readers, path = readers[:len(readers)-1], path[:len(path)-1]
				continue
			} else if err != nil && !message.IsUnknownEncoding(err) && !message.IsUnknownCharset(err) {
				return err
			}
			path[len(path)-1]++
		}
		if err := fn(slices.Clone(path), part, err); err != nil {
			return err
		}
		if mr := part.MultipartReader(); mr != nil && len(path) < MaxMIMENesting {
			readers, path = append(readers, mr), append(path, -1)
		}
		part = nil
	}
}

// sectionPath turns a 0-based part path into an IMAP section number.
func sectionPath(path []int, part *message.Entity) string {
	if len(path) == 0 && part.MultipartReader() == nil {
		return "1"
	}
	s := make([]string, len(path))
	for i, n := range path {
		s[i] = strconv.Itoa(n + 1)
	}
	return strings.Join(s, ".") // "" for a multipart root
}

// capture keeps the first limit bytes written and counts the rest.
type capture struct {
	buf       []byte
	limit     int
	total     int64
	path, typ string
}

func (c *capture) Write(b []byte) (int, error) {
	c.total += int64(len(b))
	if room := c.limit - len(c.buf); room > 0 {
		c.buf = append(c.buf, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

// text returns the captured text cleaned, cut to max bytes, and if it was cut.
func (c *capture) text(max int) (string, bool) {
	s := string(c.buf)
	cut := c.total > int64(len(c.buf))
	if c.typ == "text/html" {
		s = stripHTML(s)
	}
	s = termsafe.Text(strings.ReplaceAll(s, "\r\n", "\n"))
	if len(s) > max {
		s, cut = truncate(s, max), true
	}
	return s, cut
}

// stripHTML returns an HTML document's text (x/net/html tokenizer):
// markup, script and style dropped, blocks on new lines.
func stripHTML(s string) string {
	var b strings.Builder
	z := html.NewTokenizer(strings.NewReader(s))
	skip := "" // inside <script> or <style>: the element's name
	for {
		switch z.Next() {
		case html.ErrorToken:
			return b.String()
		case html.TextToken:
			if skip == "" {
				b.Write(z.Text())
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, _ := z.TagName()
			switch n := string(name); n {
			case "script", "style":
				skip = n
			case "br", "p", "div", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6":
				b.WriteByte('\n')
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch n := string(name); n {
			case skip:
				skip = ""
			case "p", "div":
				b.WriteByte('\n')
			}
		}
	}
}

// String returns the preview for an operator: header, parts, text.
func (p *Preview) String() string {
	var b strings.Builder
	for _, f := range p.Header {
		fmt.Fprintf(&b, "%s: %s\n", f.Key, f.Value)
	}
	if len(p.Parts) > 0 {
		b.WriteString("\nParts:\n")
		for _, pt := range p.Parts {
			path, ct := cmp.Or(pt.Path, "-"), cmp.Or(pt.ContentType, "(none)")
			fmt.Fprintf(&b, "  %-8s %s%s", path, strings.Repeat("  ", pt.Depth), termsafe.Line(ct))
			if pt.Charset != "" {
				fmt.Fprintf(&b, "; charset=%s", termsafe.Line(pt.Charset))
			}
			if pt.Filename != "" {
				fmt.Fprintf(&b, " %q", pt.Filename)
			}
			if !strings.HasPrefix(pt.ContentType, "multipart/") {
				fmt.Fprintf(&b, " (%d bytes)", pt.Size)
			}
			if pt.Err != "" {
				fmt.Fprintf(&b, " [%s]", termsafe.Line(pt.Err))
			}
			b.WriteByte('\n')
		}
	}
	if p.PartsOmitted {
		fmt.Fprintf(&b, "  (more than %d parts; the rest not listed)\n", maxPreviewParts)
	}
	if p.TextType != "" {
		note := ""
		if p.Truncated {
			note = ", truncated"
		}
		fmt.Fprintf(&b, "\n--- part %s (%s%s) ---\n", p.TextPath, p.TextType, note)
		b.WriteString(p.Text)
		if !strings.HasSuffix(p.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

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
		key, value, colon := bytes.Cut(line, []byte(":"))
		key = bytes.TrimRight(key, " \t") // an RFC 5322 field name: printable ASCII
		if !colon || len(key) == 0 || bytes.IndexFunc(key, func(r rune) bool { return r < 33 || r > 126 }) >= 0 {
			continue
		}
		cur = &field{key: string(key)}
		cur.value.Write(bytes.TrimSpace(value))
		fields = append(fields, cur)
	}
	// message.Header.Add prepends, so add in reverse to keep the order.
	var h message.Header
	for i := len(fields) - 1; i >= 0; i-- {
		h.Add(fields[i].key, fields[i].value.String())
	}
	return h, pos
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
