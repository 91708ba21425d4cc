package quarantine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"slices"
	"strconv"
	"strings"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"golang.org/x/net/html"
)

// DefaultPreviewBytes is the text preview size PreviewMessage uses when
// maxBytes is not positive.
const DefaultPreviewBytes = 4096

// maxPreviewHeaders bounds Preview.Header.
const maxPreviewHeaders = 500

// MaxMIMENesting is the deepest multipart nesting PreviewMessage descends
// into: Postfix's mime_nesting_limit default (postconf(5)), beyond which
// Postfix itself stops parsing a message. A deeper multipart part is
// listed with an error and read as opaque bytes, so that the work stays
// linear in the message size (each nesting level wraps the reader of the
// one above it).
const MaxMIMENesting = 100

// maxPreviewParts bounds Preview.Parts; Preview.PartsOmitted says more
// were there.
const maxPreviewParts = 1000

// errTooManyParts stops the walk at maxPreviewParts.
var errTooManyParts = errors.New("too many parts")

// HeaderField is one decoded header field.
type HeaderField struct {
	Key   string // canonical form, e.g. "Message-Id"
	Value string // RFC 2047 decoded, unfolded, control characters replaced
}

// Part describes one MIME part of a message.
type Part struct {
	// Path is the IMAP section number ("1", "2.1"); the root of a
	// multipart message has "".
	Path string
	// Depth is the nesting level (0 for the root).
	Depth       int
	ContentType string // media type, lower case; "" if absent or unparsable
	Charset     string // the charset parameter, if any
	Disposition string // "inline", "attachment" or ""
	Filename    string // decoded (RFC 2231 and RFC 2047)
	// Size is the decoded size in bytes: after undoing base64 or
	// quoted-printable and, for text parts with a charset, after
	// conversion to UTF-8. 0 for multipart containers.
	Size int64
	// Err describes a problem with this part (unknown charset or transfer
	// encoding, undecodable body); the part was read as well as possible.
	Err string
}

// Preview is what "quarantine show" displays of a message: its header,
// its MIME structure, and the start of its text.
type Preview struct {
	Header []HeaderField
	Parts  []Part
	// Text is the start of the first text/plain part that is not an
	// attachment, decoded to UTF-8, or failing that of the first text/html
	// part with tags removed. TextPath and TextType say which part.
	Text     string
	TextPath string
	TextType string
	// Truncated reports that the part has more text than Text.
	Truncated bool
	// PartsOmitted reports that the message has more than the 1,000
	// parts Parts lists.
	PartsOmitted bool
}

// PreviewMessage parses msg (an RFC 5322 message, CRLF or LF line ends)
// and returns its header fields in order, its MIME parts, and up to
// maxBytes bytes (DefaultPreviewBytes if maxBytes <= 0) of decoded text:
// transfer encodings are undone and charsets converted by go-message.
//
// It is tolerant: header lines that are not fields are skipped, parts
// with unknown charsets are shown raw and flagged in Part.Err. If the
// MIME structure itself is broken, PreviewMessage returns what it read so
// far together with an error; the Preview is never nil.
func PreviewMessage(msg []byte, maxBytes int) (*Preview, error) {
	return PreviewMessageContext(context.Background(), msg, maxBytes)
}

// PreviewMessageContext is PreviewMessage that stops early, returning what
// it read and ctx's error, when ctx ends (the operator who asked went
// away). Multipart parts nested deeper than MaxMIMENesting are listed with
// an error and not parsed; at most 1,000 parts are listed.
func PreviewMessageContext(ctx context.Context, msg []byte, maxBytes int) (*Preview, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultPreviewBytes
	}
	h, bodyStart := readHeader(msg)
	p := &Preview{}
	for f := h.Fields(); f.Next() && len(p.Header) < maxPreviewHeaders; {
		v, _ := f.Text() // on a decoding error: the raw value
		p.Header = append(p.Header, HeaderField{Key: CleanLine(f.Key()), Value: CleanLine(v)})
	}

	// An unknown charset or transfer encoding of the root is reported by
	// New, of the other parts by Walk.
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
		pt := Part{Path: sectionPath(path, part), Depth: len(path)}
		if len(path) == 0 {
			err = rootErr
		}
		if err != nil {
			pt.Err = err.Error()
		}
		mt, params, _ := part.Header.ContentType()
		pt.ContentType = strings.ToLower(mt)
		pt.Charset = params["charset"]
		if disp, _, derr := part.Header.ContentDisposition(); derr == nil {
			pt.Disposition = strings.ToLower(disp)
		}
		ah := mail.AttachmentHeader{Header: part.Header}
		if fn, _ := ah.Filename(); fn != "" {
			pt.Filename = CleanLine(decodeWords(fn))
		}
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
			if pt.Err != "" {
				pt.Err += "; "
			}
			pt.Err += "reading body: " + rerr.Error()
		}
		p.Parts = append(p.Parts, pt)
		return nil
	})

	switch {
	case plain != nil:
		p.Text, p.Truncated = plain.text(maxBytes, false)
		p.TextPath, p.TextType = plain.path, plain.typ
	case htm != nil:
		p.Text, p.Truncated = htm.text(maxBytes, true)
		p.TextPath, p.TextType = htm.path, htm.typ
	}
	switch {
	case walkErr == nil, errors.Is(walkErr, errTooManyParts):
		return p, nil
	case ctx.Err() != nil:
		return p, fmt.Errorf("quarantine: preview: %w", walkErr)
	}
	return p, fmt.Errorf("quarantine: preview: malformed MIME structure: %w", walkErr)
}

// walkParts is go-message's Entity.Walk (depth first, 0-based paths,
// unknown charsets and encodings passed to fn) that does not descend into
// a multipart part at depth MaxMIMENesting: fn sees it, its children are
// skipped with the rest of its body by the parent's reader.
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

// sectionPath turns go-message's 0-based part path into an IMAP section
// number.
func sectionPath(path []int, part *message.Entity) string {
	if len(path) == 0 {
		if part.MultipartReader() != nil {
			return ""
		}
		return "1"
	}
	s := make([]string, len(path))
	for i, n := range path {
		s[i] = strconv.Itoa(n + 1)
	}
	return strings.Join(s, ".")
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

// text returns the captured text cleaned for a terminal and cut to max
// bytes, and whether anything was cut.
func (c *capture) text(max int, isHTML bool) (string, bool) {
	s := string(c.buf)
	cut := c.total > int64(len(c.buf))
	if isHTML {
		s = stripHTML(s)
	}
	s = CleanText(strings.ReplaceAll(s, "\r\n", "\n"))
	if len(s) > max {
		s, cut = truncate(s, max), true
	}
	return s, cut
}

// stripHTML returns the text of an HTML document: tags, comments,
// doctypes and the content of script and style elements are dropped,
// entities unescaped, and block elements (p, div, br, tr, li, headings)
// start a new line. It uses golang.org/x/net/html's tokenizer (the HTML
// Living Standard's tokenization), so malformed markup never makes it
// fail: enough to read an HTML-only message, not a renderer.
func stripHTML(s string) string {
	var b strings.Builder
	z := html.NewTokenizer(strings.NewReader(s))
	skip := "" // inside <script> or <style>: the element's name
	for {
		switch z.Next() {
		case html.ErrorToken:
			// io.EOF, or the tokenizer's own buffer limit (none set).
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

// decodeWords decodes RFC 2047 encoded words (some mailers put them in
// filename parameters), using go-message's charset support.
func decodeWords(s string) string {
	d := mime.WordDecoder{CharsetReader: func(cs string, r io.Reader) (io.Reader, error) {
		switch cs = strings.ToLower(cs); cs {
		case "utf-8", "us-ascii":
			return r, nil
		}
		if message.CharsetReader == nil {
			return nil, errors.New("no charset support")
		}
		return message.CharsetReader(cs, r)
	}}
	if out, err := d.DecodeHeader(s); err == nil {
		return out
	}
	return s
}

// WriteTo writes the preview for an operator: header fields, the part
// list, then the text. Everything is cleaned of control characters. It
// implements io.WriterTo.
func (p *Preview) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	for _, f := range p.Header {
		fmt.Fprintf(&b, "%s: %s\n", f.Key, f.Value)
	}
	if len(p.Parts) > 0 {
		b.WriteString("\nParts:\n")
		for _, pt := range p.Parts {
			path := pt.Path
			if path == "" {
				path = "-"
			}
			ct := pt.ContentType
			if ct == "" {
				ct = "(none)"
			}
			fmt.Fprintf(&b, "  %-8s %s%s", path, strings.Repeat("  ", pt.Depth), CleanLine(ct))
			if pt.Charset != "" {
				fmt.Fprintf(&b, "; charset=%s", CleanLine(pt.Charset))
			}
			if pt.Filename != "" {
				fmt.Fprintf(&b, " %q", pt.Filename)
			}
			if !strings.HasPrefix(pt.ContentType, "multipart/") {
				fmt.Fprintf(&b, " (%d bytes)", pt.Size)
			}
			if pt.Err != "" {
				fmt.Fprintf(&b, " [%s]", CleanLine(pt.Err))
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
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// String returns the preview as WriteTo writes it.
func (p *Preview) String() string {
	var b strings.Builder
	p.WriteTo(&b)
	return b.String()
}
