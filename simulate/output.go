package simulate

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
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
		header := []string{"TIME", "ELAPSED", "LINE", "KEY"}
		for _, l := range limits {
			header = append(header, l.Name+" /"+human.Duration(l.Period))
		}
		return &tableWriter{t: termsafe.NewTable(w, append(header, "ACTION", "BY", "RETRY")...), cols: cols, start: start}, nil
	case OutputCSV:
		h := []string{"seq", "line", "time", "elapsed_s", "protocol_state", "action", "limit", "key",
			"retry_after_s", "code", "fault"}
		for _, l := range limits {
			for _, s := range []string{"key", "before", "after", "max", "over", "stored"} {
				h = append(h, l.Name+"_"+s)
			}
		}
		c := &csvWriter{w: csv.NewWriter(w), cols: cols, start: start}
		return c, c.w.Write(h)
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

func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// tableWriter prints decisions as a termsafe.Table.
type tableWriter struct {
	t     *termsafe.Table
	cols  columns
	start time.Time
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
	retry := ""
	if d := r.Decision.RetryAfter; d > 0 {
		retry = human.Retry(d)
	}
	return t.t.Row(append(cells, action, r.Decision.Limit, retry)...)
}

func (t *tableWriter) Close() error { return t.t.Flush() }

type csvWriter struct {
	w     *csv.Writer
	cols  columns
	start time.Time
	rec   []string
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

// NotMeasured is the KeySummary.Key of requests no limit measured.
const NotMeasured = "(not measured)"

// KeySummary is what happened to one rate key (or NotMeasured) over a
// trace; a request measured under several keys counts for each. Admitted
// counts pass and warn, Warned warn alone. FirstRefused is zero if none
// was refused, RefusedAfter counts from First. Peaks has, per limit, the
// highest Measure.After and the limit in force.
type KeySummary struct {
	Key          string        `json:"key"`
	Requests     int           `json:"requests"`
	Admitted     int           `json:"admitted"`
	Deferred     int           `json:"deferred"`
	Rejected     int           `json:"rejected"`
	Held         int           `json:"held"`
	Frozen       int           `json:"frozen"`
	Warned       int           `json:"warned"`
	First        time.Time     `json:"first"`
	Last         time.Time     `json:"last"`
	FirstRefused time.Time     `json:"first_refused,omitzero"`
	RefusedBy    string        `json:"refused_by,omitempty"`
	RefusedAfter time.Duration `json:"-"`
	Peaks        []Peak        `json:"peaks"`
}

// Peak is the highest rate one limit measured for one key.
type Peak struct {
	Limit    string  `json:"limit"`
	Measured bool    `json:"measured"`
	Rate     float64 `json:"rate"`
	Max      float64 `json:"max"`
}

// Refused returns Deferred + Rejected + Held + Frozen.
func (k *KeySummary) Refused() int { return k.Deferred + k.Rejected + k.Held + k.Frozen }

// Summary is the per-key account of a replayed trace: refused keys by
// first refusal, then the others by requests, then NotMeasured.
type Summary struct {
	Start, End time.Time
	Requests   int
	Limits     []policy.LimitInfo
	Keys       []KeySummary
}

// Summarizer accumulates a Summary; not safe for concurrent use.
type Summarizer struct {
	cols   columns
	filter Filter
	keys   map[string]*KeySummary
	s      Summary
}

// NewSummarizer returns a Summarizer of the keys f.Keys selects.
func NewSummarizer(limits []policy.LimitInfo, f Filter) *Summarizer {
	return &Summarizer{cols: newColumns(limits), filter: f, keys: make(map[string]*KeySummary),
		s: Summary{Limits: limits}}
}

// Add accounts for one result.
func (s *Summarizer) Add(r *Result) {
	if s.s.Requests == 0 {
		s.s.Start = r.Time
	}
	s.s.Requests++
	s.s.End = r.Time
	keys := r.Keys()
	if len(keys) == 0 {
		if len(s.filter.Keys) == 0 {
			s.add(NotMeasured, r)
		}
		return
	}
	for _, k := range keys {
		if s.filter.Key(k) {
			s.add(k, r)
		}
	}
}

func (s *Summarizer) add(key string, r *Result) {
	ks := s.keys[key]
	if ks == nil {
		ks = &KeySummary{Key: key, First: r.Time, Peaks: make([]Peak, len(s.cols.limits))}
		for i, l := range s.cols.limits {
			ks.Peaks[i] = Peak{Limit: l.Name, Max: l.Limit}
		}
		s.keys[key] = ks
	}
	ks.Requests++
	ks.Last = r.Time
	d := &r.Decision
	switch d.Action {
	case policy.Pass:
		ks.Admitted++
	case policy.Warn:
		ks.Admitted++
		ks.Warned++
	case policy.Defer:
		ks.Deferred++
	case policy.Reject:
		ks.Rejected++
	case policy.Hold:
		ks.Held++
	case policy.Freeze:
		ks.Frozen++
	}
	if r.Refused() && ks.FirstRefused.IsZero() {
		ks.FirstRefused, ks.RefusedBy, ks.RefusedAfter = r.Time, d.Limit, r.Time.Sub(ks.First)
	}
	for i := range d.Measures {
		m := &d.Measures[i]
		j, ok := s.cols.index[m.Limit]
		if !ok || m.Key != key {
			continue
		}
		p := &ks.Peaks[j]
		if !p.Measured || m.After > p.Rate {
			p.Rate = m.After
		}
		p.Measured, p.Max = true, m.Max
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Summary returns the account so far.
func (s *Summarizer) Summary() *Summary {
	out := s.s
	out.Keys = make([]KeySummary, 0, len(s.keys))
	for _, k := range s.keys {
		out.Keys = append(out.Keys, *k)
	}
	slices.SortFunc(out.Keys, func(a, b KeySummary) int {
		return cmp.Or(cmp.Compare(btoi(a.Key == NotMeasured), btoi(b.Key == NotMeasured)),
			cmp.Compare(btoi(a.FirstRefused.IsZero()), btoi(b.FirstRefused.IsZero())),
			a.FirstRefused.Compare(b.FirstRefused), cmp.Compare(b.Requests, a.Requests), strings.Compare(a.Key, b.Key))
	})
	return &out
}

// Write prints the summary as a table, CSV or JSON Lines (one key a line).
func (s *Summary) Write(w io.Writer, format string) error {
	switch format {
	case OutputTable, "":
		return s.writeTable(w)
	case OutputCSV:
		return s.writeCSV(w)
	case OutputJSONL:
		return s.writeJSONL(w)
	}
	return fmt.Errorf("%w: output format %q (want table, csv or jsonl)", ErrFormat, format)
}

func (s *Summary) writeTable(w io.Writer) error {
	refused := 0
	for i := range s.Keys {
		if s.Keys[i].Refused() > 0 {
			refused++
		}
	}
	bw := bufio.NewWriter(w)
	if s.Requests == 0 {
		fmt.Fprintln(bw, "the trace has no requests")
		return bw.Flush()
	}
	fmt.Fprintf(bw, "%d requests from %s to %s (%s h), %d keys, %d refused\n\n", s.Requests,
		formatTime(s.Start), formatTime(s.End), FormatElapsed(s.End.Sub(s.Start)), len(s.Keys), refused)
	header := []string{"KEY", "REQUESTS", "ADMITTED", "DEFERRED", "REJECTED", "HELD", "FROZEN", "WARNED", "FIRST REFUSED", "AFTER", "BY"}
	for _, l := range s.Limits {
		header = append(header, fmt.Sprintf("PEAK %s /%s", l.Name, human.Duration(l.Period)))
	}
	t := termsafe.NewTable(bw, header...)
	for i := range s.Keys {
		k := &s.Keys[i]
		first, after := "-", ""
		if !k.FirstRefused.IsZero() {
			first, after = formatTime(k.FirstRefused), "+"+FormatElapsed(k.RefusedAfter)
		}
		row := []string{k.Key, strconv.Itoa(k.Requests), strconv.Itoa(k.Admitted), strconv.Itoa(k.Deferred), strconv.Itoa(k.Rejected),
			strconv.Itoa(k.Held), strconv.Itoa(k.Frozen), strconv.Itoa(k.Warned), first, after, k.RefusedBy}
		for _, p := range k.Peaks {
			if !p.Measured {
				row = append(row, "-")
				continue
			}
			row = append(row, human.FineRate(p.Rate)+" / "+ftoa(p.Max))
		}
		t.Row(row...)
	}
	if err := t.Flush(); err != nil {
		return err
	}
	return bw.Flush()
}

func (s *Summary) writeCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	h := []string{"key", "requests", "admitted", "deferred", "rejected", "held", "frozen", "warned",
		"first", "last", "first_refused", "refused_after_s", "refused_by"}
	for _, l := range s.Limits {
		h = append(h, l.Name+"_peak", l.Name+"_max")
	}
	cw.Write(h)
	for i := range s.Keys {
		k := &s.Keys[i]
		first, after := "", ""
		if !k.FirstRefused.IsZero() {
			first, after = formatTime(k.FirstRefused), ftoa(k.RefusedAfter.Seconds())
		}
		rec := []string{k.Key, strconv.Itoa(k.Requests), strconv.Itoa(k.Admitted), strconv.Itoa(k.Deferred),
			strconv.Itoa(k.Rejected), strconv.Itoa(k.Held), strconv.Itoa(k.Frozen), strconv.Itoa(k.Warned),
			formatTime(k.First), formatTime(k.Last), first, after, k.RefusedBy}
		for _, p := range k.Peaks {
			if !p.Measured {
				rec = append(rec, "", "")
				continue
			}
			rec = append(rec, ftoa(p.Rate), ftoa(p.Max))
		}
		cw.Write(rec)
	}
	cw.Flush()
	return cw.Error()
}

// keyRecord is the JSON Lines form of a KeySummary.
type keyRecord struct {
	*KeySummary
	RefusedAfterS *float64 `json:"refused_after_s,omitempty"`
}

func (s *Summary) writeJSONL(w io.Writer) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(termsafe.NewJSONWriter(bw))
	for i := range s.Keys {
		k := &s.Keys[i]
		rec := keyRecord{KeySummary: k}
		if !k.FirstRefused.IsZero() {
			v := k.RefusedAfter.Seconds()
			rec.RefusedAfterS = &v
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	return bw.Flush()
}
