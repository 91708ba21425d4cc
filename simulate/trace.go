package simulate

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Trace formats: JSON Lines, a JSON array of the same objects, CSV with a header row.
const (
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
	FormatJSON  = "json"
)

// MaxRequests bounds the requests a trace may expand to; Read gives up
// after maxErrors line errors.
const (
	MaxRequests = 20_000_000
	maxErrors   = 20
)

// Entry is one line of a trace (Line, 1-based): Request made Count (>= 1)
// times, Every apart, from Time (UTC). With Outcome set, it is what
// happened to Request's recipient, Request being the submission.
type Entry struct {
	Line    int
	Time    time.Time
	Count   int
	Every   time.Duration
	Request policy.Request
	Outcome policy.OutcomeKind
}

// traceLine is the JSON Lines form of an Entry.
type traceLine struct {
	Time           string `json:"time"`
	ProtocolState  string `json:"protocol_state"`
	SASLUsername   string `json:"sasl_username,omitempty"`
	SASLMethod     string `json:"sasl_method,omitempty"`
	Sender         string `json:"sender"`
	Recipient      string `json:"recipient,omitempty"`
	RecipientCount string `json:"recipient_count,omitempty"`
	Size           string `json:"size,omitempty"`
	ClientAddress  string `json:"client_address,omitempty"`
	ClientName     string `json:"client_name,omitempty"`
	QueueID        string `json:"queue_id,omitempty"`
	Instance       string `json:"instance,omitempty"`
	Count          int    `json:"count,omitempty"`
	Every          string `json:"every,omitempty"`
	Outcome        string `json:"outcome,omitempty"`
}

// MarshalJSON returns e as one trace object that Read reads back: the
// request attributes a trace from a mail log has, count and every.
func (e Entry) MarshalJSON() ([]byte, error) {
	r := &e.Request
	l := traceLine{Time: e.Time.UTC().Format(time.RFC3339Nano), ProtocolState: r.ProtocolState,
		SASLUsername: r.SASLUsername, SASLMethod: r.SASLMethod, Sender: r.Sender, Recipient: r.Recipient,
		ClientAddress: r.ClientAddress, ClientName: r.ClientName, QueueID: r.QueueID, Instance: r.Instance}
	if e.Outcome != 0 {
		l.Outcome = e.Outcome.String()
	} else if r.ProtocolState != policy.StateRcpt {
		l.RecipientCount = strconv.Itoa(r.RecipientCount)
		l.Size = strconv.FormatInt(r.Size, 10)
	}
	if e.Count > 1 {
		l.Count = e.Count
		if e.Every > 0 {
			l.Every = e.Every.String()
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	err := enc.Encode(&l)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

// Trace is a parsed trace, entries in file order; the zero value is empty.
type Trace struct {
	Entries []Entry
}

// Len returns the number of requests (and outcomes) the trace expands to.
func (t *Trace) Len() int {
	n := 0
	for i := range t.Entries {
		n += t.Entries[i].Count
	}
	return n
}

// Span returns the times of the first and last request (zero if none).
func (t *Trace) Span() (start, end time.Time) {
	for i := range t.Entries {
		e := &t.Entries[i]
		if i == 0 || e.Time.Before(start) {
			start = e.Time
		}
		if l := e.Time.Add(time.Duration(e.Count-1) * e.Every); i == 0 || l.After(end) {
			end = l
		}
	}
	return start, end
}

// Event is one request (or outcome) of an expanded trace: Seq its 1-based
// position in replay order, Line its trace line. Request is shared by the
// repeats of a line and must not be modified.
type Event struct {
	Seq, Line int
	Time      time.Time
	Request   *policy.Request
	Outcome   policy.OutcomeKind
}

// Events returns the requests in replay order: by time, at equal times in
// file order (the repeats of a line before the next line).
func (t *Trace) Events() iter.Seq[Event] {
	return func(yield func(Event) bool) {
		h := make(cursorHeap, 0, len(t.Entries))
		for i := range t.Entries {
			h = append(h, cursor{entry: i, t: t.Entries[i].Time})
		}
		heap.Init(&h)
		seq := 0
		for len(h) > 0 {
			c := &h[0]
			e := &t.Entries[c.entry]
			seq++
			if !yield(Event{Seq: seq, Line: e.Line, Time: c.t, Request: &e.Request, Outcome: e.Outcome}) {
				return
			}
			c.k++
			if c.k >= e.Count {
				heap.Pop(&h)
				continue
			}
			c.t = e.Time.Add(time.Duration(c.k) * e.Every)
			heap.Fix(&h, 0)
		}
	}
}

// cursor is the next request of one entry during the merge.
type cursor struct {
	entry int // index in Trace.Entries: the tie-break, file order
	k     int // repeat number
	t     time.Time
}

type cursorHeap []cursor

func (h cursorHeap) Len() int { return len(h) }
func (h cursorHeap) Less(i, j int) bool {
	return cmp.Or(h[i].t.Compare(h[j].t), cmp.Compare(h[i].entry, h[j].entry)) < 0
}
func (h cursorHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)   { *h = append(*h, x.(cursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

const sniffLen = 64 << 10 // how much sniffFormat peeks at

// sniffFormat tells the format from the first byte after blank and '#'
// lines: '[' FormatJSON, '{' or none FormatJSONL, else FormatCSV.
func sniffFormat(br *bufio.Reader) string {
	b, _ := br.Peek(sniffLen)
	for len(b) > 0 {
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			b = b[1:]
		case '#':
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return FormatJSONL
			}
			b = b[i+1:]
		case '[':
			return FormatJSON
		case '{':
			return FormatJSONL
		default:
			return FormatCSV
		}
	}
	return FormatJSONL
}

// ReadFile is Read of the file at path, errors prefixed with path.
func ReadFile(path, format string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := Read(f, format)
	if err != nil {
		return nil, prefixErrors(path, err)
	}
	return t, nil
}

// prefixErrors puts "path: " in front of every joined error.
func prefixErrors(path string, err error) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		if _, line := err.(*LineError); !line {
			errs = j.Unwrap()
		}
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s: %w", path, e)
	}
	return errors.Join(out...)
}

// Read parses a trace in format ("" sniffs it). The error joins up to
// maxErrors *LineError values.
func Read(r io.Reader, format string) (*Trace, error) {
	br := bufio.NewReaderSize(r, sniffLen)
	if b, err := br.Peek(len(bom)); err == nil && bytes.Equal(b, bom) {
		br.Discard(len(bom))
	}
	if format == "" {
		format = sniffFormat(br)
	}
	switch format {
	case FormatJSONL:
		return readJSONL(br)
	case FormatJSON:
		return readJSON(br)
	case FormatCSV:
		return readCSV(br)
	}
	return nil, fmt.Errorf("%w: trace format %q (want jsonl, json or csv)", ErrFormat, format)
}

// errList collects line errors and the running request total.
type errList struct {
	errs  []error
	total int
}

func (l *errList) add(line int, err error) bool {
	l.errs = append(l.errs, &LineError{Line: line, Err: err})
	return len(l.errs) < maxErrors
}

// take adds e to t, or err as line n's; false when reading should stop.
func (l *errList) take(t *Trace, n int, e Entry, err error) bool {
	if err != nil {
		return l.add(n, err)
	}
	l.total += e.Count
	if l.total > MaxRequests {
		l.add(e.Line, fmt.Errorf("%w: more than %d requests", ErrTooLarge, MaxRequests))
		return false
	}
	t.Entries = append(t.Entries, e)
	return true
}

// result is t, or the errors collected.
func (l *errList) result(t *Trace) (*Trace, error) {
	if len(l.errs) >= maxErrors {
		l.errs = append(l.errs, fmt.Errorf("%w: too many errors, stopped", ErrTrace))
	}
	if err := errors.Join(l.errs...); err != nil {
		return nil, err
	}
	return t, nil
}

var bom = []byte("\ufeff")

func readJSONL(r io.Reader) (*Trace, error) {
	t := &Trace{}
	var el errList
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		if e, err := parseJSONLine(n, line); !el.take(t, n, e, err) {
			break
		}
	}
	if err := sc.Err(); err != nil {
		el.add(n+1, err) // e.g. a line longer than 4 MB
	}
	return el.result(t)
}

// readJSON reads a JSON array; an entry's Line is where its object starts.
func readJSON(r io.Reader) (*Trace, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	t := &Trace{}
	var el errList
	dec := json.NewDecoder(bytes.NewReader(data))
	line, counted := 1, int64(0)
	lineAt := func(off int64) int {
		for off < int64(len(data)) && strings.IndexByte(" \t\r\n,", data[off]) >= 0 {
			off++
		}
		line += bytes.Count(data[counted:off], []byte("\n"))
		counted = off
		return line
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		el.add(lineAt(0), errors.New("not a JSON array of trace objects"))
		return el.result(nil)
	}
	for dec.More() {
		n := lineAt(dec.InputOffset())
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			el.add(n, fmt.Errorf("not JSON: %v", jsonErr(err)))
			break
		}
		if e, err := parseJSONLine(n, raw); !el.take(t, n, e, err) {
			break
		}
	}
	return el.result(t)
}

func parseJSONLine(n int, line []byte) (Entry, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return Entry{}, fmt.Errorf("not a JSON object: %v", jsonErr(err))
	}
	if m == nil {
		return Entry{}, errors.New("not a JSON object: null")
	}
	if dec.More() {
		return Entry{}, errors.New("more than one JSON value on the line")
	}
	b := builder{e: Entry{Line: n, Count: 1}}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		var v string
		switch x := m[k].(type) {
		case nil:
			continue
		case string:
			v = x
		case json.Number:
			v = x.String()
		default:
			return Entry{}, fmt.Errorf("field %q: want a string or a number, got %s", k, jsonType(x))
		}
		if err := b.set(k, v); err != nil {
			return Entry{}, err
		}
	}
	return b.finish()
}

func jsonErr(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at column %d)", se, se.Offset)
	}
	return err.Error()
}

func jsonType(v any) string {
	switch v.(type) {
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	}
	return "an object" // UseNumber: a string, number or null is not asked about
}

func readCSV(r io.Reader) (*Trace, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.TrimLeadingSpace = true
	cr.FieldsPerRecord = -1
	t := &Trace{}
	var el errList
	var header []string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				el.add(pe.Line, pe.Err)
			} else {
				el.errs = append(el.errs, fmt.Errorf("%w: %v", ErrTrace, err))
			}
			break
		}
		n, _ := cr.FieldPos(0)
		if header == nil {
			header, err = csvHeader(rec)
			if err != nil {
				el.add(n, err)
				break
			}
			continue
		}
		if e, err := csvEntry(n, header, rec); !el.take(t, n, e, err) {
			break
		}
	}
	return el.result(t)
}

func csvEntry(n int, header, rec []string) (Entry, error) {
	if len(rec) != len(header) {
		return Entry{}, fmt.Errorf("%d fields, but the header has %d", len(rec), len(header))
	}
	b := builder{e: Entry{Line: n, Count: 1}}
	for i, v := range rec {
		if err := b.set(header[i], v); err != nil {
			return Entry{}, err
		}
	}
	return b.finish()
}

func csvHeader(rec []string) ([]string, error) {
	h := make([]string, len(rec))
	var errs []error
	seen := map[string]bool{}
	for i, name := range rec {
		name = strings.ToLower(strings.TrimSpace(name))
		h[i] = name
		switch {
		case !known(name):
			errs = append(errs, fmt.Errorf("unknown field %q in the header", name))
		case seen[name]:
			errs = append(errs, fmt.Errorf("field %q appears twice in the header", name))
		}
		seen[name] = true
	}
	if !seen["time"] && len(errs) == 0 {
		errs = append(errs, errors.New(`the header has no "time" column`))
	}
	return h, errors.Join(errs...)
}

// ignored are policy attributes (SMTPD_POLICY_README) the engine does not use.
var ignored = map[string]bool{
	"request": true, "client_port": true, "server_address": true, "server_port": true,
	"encryption_protocol": true, "encryption_cipher": true, "encryption_keysize": true,
	"etrn_domain": true, "stress": true, "ccert_subject": true, "ccert_issuer": true,
	"ccert_fingerprint": true, "ccert_pubkey_fingerprint": true, "policy_context": true,
	"compatibility_level": true, "mail_version": true,
}

var fields = []string{"time", "count", "every", "until", "protocol_state", "recipient_count", "size", "via", "outcome"}

// textFields are the request attributes taken as they are, in textAttrs' order.
var textFields = []string{"protocol_name", "helo_name", "queue_id", "sender", "recipient", "client_address",
	"client_name", "reverse_client_name", "instance", "sasl_method", "sasl_username", "sasl_sender"}

func textAttrs(r *policy.Request) []*string {
	return []*string{&r.ProtocolName, &r.HeloName, &r.QueueID, &r.Sender, &r.Recipient, &r.ClientAddress,
		&r.ClientName, &r.ReverseClientName, &r.Instance, &r.SASLMethod, &r.SASLUsername, &r.SASLSender}
}

// outcomeKinds are the values of the field "outcome".
var outcomeKinds = map[string]policy.OutcomeKind{"bounce": policy.OutcomeBounce,
	"unknown_rcpt": policy.OutcomeUnknownRcpt, "deferral": policy.OutcomeDeferral}

func known(name string) bool {
	return slices.Contains(fields, name) || slices.Contains(textFields, name) || ignored[name]
}

var states = []string{policy.StateConnect, policy.StateEHLO, policy.StateHELO, policy.StateMail,
	policy.StateRcpt, policy.StateData, policy.StateEndOfMessage, policy.StateVrfy, policy.StateEtrn}

// builder assembles an Entry from field values in any order.
type builder struct {
	e             Entry
	haveTime      bool
	haveCount     bool
	haveRcptCount bool
	haveUntil     bool
	until         time.Time
}

func (b *builder) set(name, v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil
	}
	r := &b.e.Request
	var err error
	switch name {
	case "time":
		b.e.Time, err = ParseTime(v)
		b.haveTime = true
	case "until":
		b.until, err = ParseTime(v)
		b.haveUntil = true
	case "count":
		b.e.Count, err = strconv.Atoi(v)
		if err == nil && (b.e.Count < 1 || b.e.Count > MaxRequests) {
			err = fmt.Errorf("must be 1 to %d", MaxRequests)
		}
		b.haveCount = true
	case "every":
		b.e.Every, err = parseEvery(v)
	case "protocol_state":
		s := strings.ToUpper(v)
		if !slices.Contains(states, s) {
			err = fmt.Errorf("unknown protocol state %q (want RCPT, DATA, END-OF-MESSAGE, ...)", v)
		}
		r.ProtocolState = s
	case "recipient_count":
		r.RecipientCount, err = strconv.Atoi(v)
		if err == nil && r.RecipientCount < 0 {
			err = errors.New("must not be negative")
		}
		b.haveRcptCount = true
	case "size":
		r.Size, err = policy.ParseSize(v)
	case "via":
		if v != policy.ViaPolicy && v != policy.ViaMilter {
			err = fmt.Errorf("unknown front end %q (want policy or milter)", v)
		}
		r.Stage = v
	case "outcome":
		var ok bool
		if b.e.Outcome, ok = outcomeKinds[v]; !ok {
			err = fmt.Errorf("unknown outcome %q (want bounce, unknown_rcpt or deferral)", v)
		}
	default:
		if i := slices.Index(textFields, name); i >= 0 {
			*textAttrs(r)[i] = v
		} else if !ignored[name] {
			return fmt.Errorf("unknown field %q", name)
		}
	}
	if err != nil {
		return fmt.Errorf("field %q: %v", name, err)
	}
	return nil
}

func (b *builder) finish() (Entry, error) {
	e := b.e
	if !b.haveTime {
		return e, errors.New(`missing "time"`)
	}
	switch {
	case b.haveUntil && b.haveCount:
		return e, errors.New(`give "count" or "until", not both`)
	case b.haveUntil && e.Every == 0:
		return e, errors.New(`"until" needs "every"`)
	case b.haveUntil:
		d := b.until.Sub(e.Time)
		if d <= 0 {
			return e, errors.New(`"until" is not after "time"`)
		}
		n := (d + e.Every - 1) / e.Every
		if n > MaxRequests {
			return e, fmt.Errorf("%w: \"until\" and \"every\" make %d requests, more than %d", ErrTooLarge, n, MaxRequests)
		}
		e.Count = int(n)
	case e.Every != 0 && !b.haveCount:
		return e, errors.New(`"every" needs "count" or "until"`)
	}
	if e.Count > 1 && e.Every > time.Duration(math.MaxInt64)/time.Duration(e.Count-1) {
		return e, errors.New(`"count" times "every" is too long`)
	}
	r := &e.Request
	r.ProtocolState = cmp.Or(r.ProtocolState, policy.StateEndOfMessage)
	if !b.haveRcptCount && e.Outcome == 0 && (r.ProtocolState == policy.StateEndOfMessage || r.ProtocolState == policy.StateData) {
		r.RecipientCount = 1
	}
	r.Stage = cmp.Or(r.Stage, policy.ViaPolicy)
	return e, nil
}

// ParseTime parses RFC 3339 (a space for the T allowed) or Unix seconds
// ("1795197600.5"), in UTC.
func ParseTime(s string) (time.Time, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
			return time.Time{}, fmt.Errorf("%q is not a plausible Unix time", s)
		}
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	if len(s) > 10 && s[10] == ' ' {
		s = s[:10] + "T" + s[11:]
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-11-20T18:00:00Z) nor Unix seconds", s)
	}
	return t.UTC(), nil
}

// parseEvery parses a duration ("24s", "2d") or a number of seconds.
func parseEvery(s string) (time.Duration, error) {
	var d time.Duration
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if !(f > 0) || f > 1e9 {
			return 0, fmt.Errorf("%q must be a positive number of seconds", s)
		}
		d = time.Duration(math.Round(f * 1e9))
	} else if d, err = human.ParseDuration(s); err != nil {
		return 0, fmt.Errorf("%q is not a duration (use e.g. 24s, 1.5s, 10m, 1h)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return d, nil
}

var (
	// ErrTrace wraps every error about a trace's content, in a *LineError.
	ErrTrace = errors.New("simulate: invalid trace")
	// ErrFormat is returned for an unsupported trace, output or plot format.
	ErrFormat = errors.New("simulate: unknown format")
	// ErrTooLarge is returned for a trace of more than MaxRequests requests.
	ErrTooLarge = errors.New("simulate: trace too large")
)

// LineError is an error at a (1-based) line of a trace; it wraps ErrTrace.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns ErrTrace and the underlying error.
func (e *LineError) Unwrap() []error { return []error{ErrTrace, e.Err} }
