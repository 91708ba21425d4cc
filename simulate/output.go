package simulate

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Output formats of decisions and summaries, a row per request (or key).
const (
	OutputTable = "table"
	OutputCSV   = "csv"
	OutputJSONL = "jsonl"
)

// Writer writes decisions in one output format; Close flushes.
type Writer interface {
	Write(r *Result) error
	Close() error
}

// NewWriter returns a Writer of format to w, a column per limit
// (Engine.Limits), elapsed time counted from start.
func NewWriter(w io.Writer, format string, limits []policy.LimitInfo, start time.Time) (Writer, error) {
	cols := newColumns(limits)
	switch format {
	case OutputTable, "":
		return newTableWriter(w, cols, start), nil
	case OutputCSV:
		c := &csvWriter{w: csv.NewWriter(w), cols: cols, start: start}
		return c, c.header()
	case OutputJSONL:
		bw := bufio.NewWriter(w)
		return &jsonlWriter{bw: bw, enc: json.NewEncoder(termsafe.NewJSONWriter(bw)), start: start}, nil
	}
	return nil, fmt.Errorf("%w: output format %q (want table, csv or jsonl)", ErrFormat, format)
}

// columns maps limit names to their column, in configuration order.
type columns struct {
	limits []policy.LimitInfo
	index  map[string]int
}

func newColumns(limits []policy.LimitInfo) columns {
	c := columns{limits: limits, index: make(map[string]int, len(limits))}
	for i, l := range limits {
		c.index[l.Name] = i
	}
	return c
}

// byLimit returns r's measures in column order, nil where none.
func (c columns) byLimit(r *Result) []*policy.Measure {
	out := make([]*policy.Measure, len(c.limits))
	for i := range r.Decision.Measures {
		m := &r.Decision.Measures[i]
		if j, ok := c.index[m.Limit]; ok {
			out[j] = m
		}
	}
	return out
}

// FormatElapsed prints time since the start of a trace as h:mm:ss
// ("55:12:00", "0:00:01.5").
func FormatElapsed(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	h, m, s := d/time.Hour, (d%time.Hour)/time.Minute, d%time.Minute
	out := fmt.Sprintf("%s%d:%02d:%02d", sign, h, m, s/time.Second)
	if frac := s % time.Second; frac != 0 {
		f := strconv.FormatFloat(float64(frac)/1e9, 'f', 3, 64) // "0.500"
		out += strings.TrimRight(strings.TrimPrefix(f, "0"), "0")
	}
	return out
}

func retry(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return human.Retry(d)
}

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// tableWriter prints decisions as a termsafe.Table.
type tableWriter struct {
	t     *termsafe.Table
	cols  columns
	start time.Time
}

func newTableWriter(w io.Writer, cols columns, start time.Time) *tableWriter {
	header := []string{"TIME", "ELAPSED", "LINE", "KEY"}
	for _, l := range cols.limits {
		header = append(header, l.Name+" /"+human.Duration(l.Period))
	}
	return &tableWriter{t: termsafe.NewTable(w, append(header, "ACTION", "BY", "RETRY")...), cols: cols, start: start}
}

// Write prints one row: per limit "[key: ]before→after ≤ max" (> when over).
func (t *tableWriter) Write(r *Result) error {
	key := "-"
	if keys := r.Keys(); len(keys) > 0 {
		key = keys[0]
	} else if r.Decision.Reason == "exempt" {
		key = "(exempt)"
	}
	cells := []string{formatTime(r.Time), "+" + FormatElapsed(r.Time.Sub(t.start)), strconv.Itoa(r.Line), key}
	for _, m := range t.cols.byLimit(r) {
		if m == nil {
			cells = append(cells, "-")
			continue
		}
		prefix := ""
		if m.Key != key {
			prefix = m.Key + ": "
		}
		cmp := "≤"
		if m.Over {
			cmp = ">"
		}
		cells = append(cells, fmt.Sprintf("%s%s→%s %s %s", prefix, human.FineRate(m.Before), human.FineRate(m.After), cmp, ftoa(m.Max)))
	}
	action := r.Decision.Action.String()
	if r.Decision.Fault != nil {
		action += " (fault: " + r.Decision.Fault.Error() + ")"
	}
	return t.t.Row(append(cells, action, r.Decision.Limit, retry(r.Decision.RetryAfter))...)
}

func (t *tableWriter) Close() error { return t.t.Flush() }

type csvWriter struct {
	w     *csv.Writer
	cols  columns
	start time.Time
	rec   []string
}

func (c *csvWriter) header() error {
	h := []string{"seq", "line", "time", "elapsed_s", "protocol_state", "action", "limit", "key",
		"retry_after_s", "code", "fault"}
	for _, l := range c.cols.limits {
		for _, s := range []string{"key", "before", "after", "max", "over", "stored"} {
			h = append(h, l.Name+"_"+s)
		}
	}
	return c.w.Write(h)
}

func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func seconds(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
		return "inf"
	}
	return ftoa(d.Seconds())
}

func (c *csvWriter) Write(r *Result) error {
	d := &r.Decision
	code, fault := "", ""
	if d.Code != 0 {
		code = strconv.Itoa(d.Code)
	}
	if d.Fault != nil {
		fault = d.Fault.Error()
	}
	c.rec = append(c.rec[:0], strconv.Itoa(r.Seq), strconv.Itoa(r.Line), formatTime(r.Time),
		seconds(r.Time.Sub(c.start)), r.Request.ProtocolState, d.Action.String(), d.Limit, d.Key,
		seconds(d.RetryAfter), code, fault)
	for _, m := range c.cols.byLimit(r) {
		if m == nil {
			c.rec = append(c.rec, "", "", "", "", "", "")
			continue
		}
		c.rec = append(c.rec, m.Key, ftoa(m.Before), ftoa(m.After), ftoa(m.Max),
			strconv.FormatBool(m.Over), strconv.FormatBool(m.Stored))
	}
	return c.w.Write(c.rec)
}

func (c *csvWriter) Close() error {
	c.w.Flush()
	return c.w.Error()
}

// DecisionRecord is the JSON Lines form of one decision.
type DecisionRecord struct {
	Seq         int             `json:"seq"`
	Line        int             `json:"line"`
	Time        time.Time       `json:"time"`
	ElapsedS    float64         `json:"elapsed_s"`
	State       string          `json:"protocol_state"`
	Action      string          `json:"action"`
	Limit       string          `json:"limit,omitempty"`
	Key         string          `json:"key,omitempty"`
	RetryAfterS float64         `json:"retry_after_s,omitempty"`
	Code        int             `json:"code,omitempty"`
	Enhanced    string          `json:"enhanced,omitempty"`
	Text        string          `json:"text,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Fault       string          `json:"fault,omitempty"`
	Measures    []MeasureRecord `json:"measures"`
}

// MeasureRecord is the JSON Lines form of one limit's measurement.
type MeasureRecord struct {
	Limit       string  `json:"limit"`
	Key         string  `json:"key"`
	Cost        float64 `json:"cost"`
	Before      float64 `json:"before"`
	After       float64 `json:"after"`
	Max         float64 `json:"max"`
	Over        bool    `json:"over"`
	Action      string  `json:"action"`
	RetryAfterS float64 `json:"retry_after_s,omitempty"`
	Stored      bool    `json:"stored"`
}

// jsonSeconds is d in seconds, with "never" as -1 (JSON has no infinity).
func jsonSeconds(d time.Duration) float64 {
	if d == time.Duration(math.MaxInt64) {
		return -1
	}
	return d.Seconds()
}

type jsonlWriter struct {
	bw    *bufio.Writer
	enc   *json.Encoder
	start time.Time
}

func (j *jsonlWriter) Write(r *Result) error {
	d := &r.Decision
	rec := DecisionRecord{Seq: r.Seq, Line: r.Line, Time: r.Time, ElapsedS: r.Time.Sub(j.start).Seconds(),
		State: r.Request.ProtocolState, Action: d.Action.String(), Limit: d.Limit, Key: d.Key,
		RetryAfterS: jsonSeconds(d.RetryAfter), Code: d.Code, Enhanced: d.Enhanced, Text: d.Text,
		Reason: d.Reason, Measures: make([]MeasureRecord, len(d.Measures))}
	if d.Fault != nil {
		rec.Fault = d.Fault.Error()
	}
	for i, m := range d.Measures {
		rec.Measures[i] = MeasureRecord{Limit: m.Limit, Key: m.Key, Cost: m.Cost, Before: human.Finite(m.Before),
			After: human.Finite(m.After), Max: m.Max, Over: m.Over, Action: m.Action.String(),
			RetryAfterS: jsonSeconds(m.RetryAfter), Stored: m.Stored}
	}
	return j.enc.Encode(&rec)
}

func (j *jsonlWriter) Close() error { return j.bw.Flush() }
