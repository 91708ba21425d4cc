// Package termsafe makes client-supplied text safe to show an operator: it
// replaces C0 and C1 controls (ECMA-48 escape sequences), the Unicode
// bidirectional controls (UAX #9; CVE-2021-42574), the invisible
// zero-width characters and tag characters (Unicode TR #36 3.1, UTS #39)
// and invalid UTF-8 with U+FFFD. JSON output must not use it: JSON
// escapes, it does not strip.
package termsafe

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Replacement is what every unsafe rune becomes.
const Replacement = '\uFFFD'

// Unsafe reports whether r must not reach a terminal as it is: a C0 or C1
// control or DEL, a bidirectional control, U+2028 and U+2029, the
// zero-width U+200B to U+200D, U+2060 and U+FEFF, or a tag character.
func Unsafe(r rune) bool {
	return unicode.IsControl(r) ||
		r >= '\u202A' && r <= '\u202E' || r >= '\u2066' && r <= '\u2069' ||
		r == '\u200E' || r == '\u200F' || r == '\u061C' || r == '\u2028' || r == '\u2029' ||
		r >= '\u200B' && r <= '\u200D' || r == '\u2060' || r == '\uFEFF' || r >= 0xE0000 && r <= 0xE007F
}

// Line returns s made one safe line: tabs as spaces, every other unsafe
// rune (CR and LF too) as U+FFFD, trimmed. It allocates only for a change.
func Line(s string) string {
	return strings.TrimSpace(clean(s, false))
}

// Text is Line for multi-line text: it keeps newlines and tabs, drops CR,
// and does not trim.
func Text(s string) string { return clean(s, true) }

func clean(s string, multiline bool) string {
	if safe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range strings.ToValidUTF8(s, string(Replacement)) {
		switch {
		case (r == '\n' || r == '\t') && multiline:
			b.WriteRune(r)
		case r == '\t':
			b.WriteByte(' ')
		case r == '\r' && multiline:
		case Unsafe(r):
			b.WriteRune(Replacement)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// safe reports whether s is valid UTF-8 with no unsafe rune.
func safe[T string | []byte](s T) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && n <= 1 || Unsafe(r) {
			return false
		}
		i += n
	}
	return true
}

// NewWriter returns a writer passing what is written to w through Text,
// holding a UTF-8 sequence split across writes. JSON must be escaped
// first (EscapeJSON). Not safe for concurrent use.
func NewWriter(w io.Writer) io.Writer { return &writer{w: w} }

type writer struct {
	w       io.Writer
	pending []byte
}

func (t *writer) Write(p []byte) (int, error) {
	if len(t.pending) == 0 && safe(p) {
		return t.w.Write(p)
	}
	data := p
	if len(t.pending) > 0 {
		data = append(t.pending, p...)
	}
	cut := len(data)
	for i := len(data) - 1; i >= 0 && i >= len(data)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(data[i]) {
			if !utf8.FullRune(data[i:]) {
				cut = i
			}
			break
		}
	}
	t.pending = append(t.pending[:0:0], data[cut:]...)
	if _, err := io.WriteString(t.w, Text(string(data[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// EscapeJSON returns JSON text js with the unsafe runes encoding/json
// leaves raw (DEL, C1, bidi controls) as \uXXXX: the same value.
func EscapeJSON(js []byte) []byte {
	if safe(string(js)) {
		return js
	}
	out := make([]byte, 0, len(js)+16)
	for i := 0; i < len(js); {
		r, n := utf8.DecodeRune(js[i:])
		switch {
		case (r != utf8.RuneError || n > 1) && Unsafe(r) && r > 0xffff:
			r1, r2 := utf16.EncodeRune(r) // JSON escapes outside the BMP as a surrogate pair
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		case (r != utf8.RuneError || n > 1) && Unsafe(r) && r >= 0x20:
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, js[i:i+n]...)
		}
		i += n
	}
	return out
}

// Unwrap returns the writer a NewWriter wraps, or w itself, for output
// that is data (quarantine show --raw).
func Unwrap(w io.Writer) io.Writer {
	if t, ok := w.(*writer); ok {
		return t.w
	}
	return w
}

// NewJSONWriter returns a writer for a json.Encoder (one value a Write)
// that applies EscapeJSON before writing to w.
func NewJSONWriter(w io.Writer) io.Writer { return jsonWriter{w} }

type jsonWriter struct{ w io.Writer }

func (j jsonWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(EscapeJSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

const tableSample = 1000

// Table writes rows as columns two spaces apart, cells cleaned as by Line
// (untrimmed), sized from the first tableSample rows; a later wider cell
// widens its column from there on. Not safe for concurrent use.
type Table struct {
	bw      *bufio.Writer
	widths  []int
	pending [][]string
}

// NewTable returns a Table writing to w, header its first row.
func NewTable(w io.Writer, header ...string) *Table {
	t := &Table{bw: bufio.NewWriter(w)}
	t.Row(header...)
	return t
}

// Row adds one row; the error is w's.
func (t *Table) Row(cells ...string) error {
	for i, c := range cells {
		cells[i] = clean(c, false)
	}
	if t.widths != nil {
		return t.write(cells)
	}
	t.pending = append(t.pending, cells)
	if len(t.pending) > tableSample {
		return t.sized()
	}
	return nil
}

func (t *Table) sized() error {
	t.widths = []int{}
	for _, row := range t.pending {
		for i, c := range row {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(c))
		}
	}
	for _, row := range t.pending {
		if err := t.write(row); err != nil {
			return err
		}
	}
	t.pending = nil
	return nil
}

func (t *Table) write(cells []string) error {
	last := len(cells) - 1
	for last > 0 && cells[last] == "" {
		last--
	}
	for i, c := range cells[:last+1] {
		t.bw.WriteString(c)
		if i < last {
			if i == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			n := utf8.RuneCountInString(c)
			t.widths[i] = max(t.widths[i], n)
			t.bw.WriteString(strings.Repeat(" ", t.widths[i]-n+2))
		}
	}
	return t.bw.WriteByte('\n')
}

// Flush writes the rows held; call it after the last Row.
func (t *Table) Flush() error {
	if t.widths == nil {
		if err := t.sized(); err != nil {
			return err
		}
	}
	return t.bw.Flush()
}
