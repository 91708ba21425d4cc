package simulate

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/policy"
)

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
