package termsafe

import (
	"bufio"
	"io"
	"strings"
	"unicode/utf8"
)

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
