package maillog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Options configures a Reader; the zero value is usable.
type Options struct {
	// Location is the zone of timestamps without an offset; nil: time.Local.
	Location *time.Location
	// End dates year-less timestamps: a file's last line gets the latest
	// year that puts it before End plus a day. Zero: the file's
	// modification time (stdin: now).
	End time.Time
}

// maxLine is the longest line read; longer ones are unparsable. Stats
// samples maxSamples of them.
const (
	maxLine    = 64 << 10
	maxSamples = 5
)

// unparsable counts an unparsable line and samples it.
func (r *Reader) unparsable(sample string) {
	r.stats.Unparsable++
	if len(r.stats.Samples) < maxSamples {
		r.stats.Samples = append(r.stats.Samples, sample)
	}
}

// Stats counts what a Reader read. Samples are the first unparsable lines
// as "FILE:LINE: problem: text"; Senders are distinct SASL users, else
// envelope senders. Not in the trace: NotSMTP (pickup, bounces),
// Incomplete, Rejected (after a queue ID), NoQueue. Held (never released)
// are in it, without a size. Start and End are of the first and last
// message.
type Stats struct {
	Files, Lines                  int
	Unparsable                    int
	Samples                       []string
	Messages, Senders, Recipients int
	NotSMTP                       int
	Incomplete, Rejected, NoQueue int
	Held                          int
	Outcomes                      int // recipients' bounces and deferrals in the trace
	Start, End                    time.Time
}

// Message is one message joined from its log lines by host and queue ID
// (Exim: message ID, Host ""). Received is when the client was accepted,
// Queued when the message was complete, both UTC. Size is qmgr's size= or
// Exim's S=, NRcpt qmgr's nrcpt=. Recipients are distinct, as the client
// gave them (orig_to=), in order. Outcomes are its recipients' failures,
// each recipient and kind once.
type Message struct {
	Host, QueueID             string
	Received, Queued          time.Time
	ClientName, ClientAddress string
	SASLMethod, SASLUsername  string
	Sender                    string
	Size                      int64
	NRcpt                     int
	Recipients                []string
	MessageID                 string
	Outcomes                  []Outcome

	smtp, queued, rejected, local, held bool
	seq                                 int
	seen                                time.Time // the time of its latest line
}

// Outcome is what happened to one recipient of a Message, and when.
type Outcome struct {
	Time      time.Time
	Recipient string
	Kind      policy.OutcomeKind
}

// RecipientCount is the larger of NRcpt and len(Recipients).
func (m *Message) RecipientCount() int { return max(m.NRcpt, len(m.Recipients)) }

// Reader reads mail logs, in any order (rotated, .gz), and joins their
// lines into messages in a second pass in time order. Not safe for
// concurrent use.
type Reader struct {
	opts    Options
	sources []*source
	stats   Stats
}

// source is one log: its open file (stdin: an unlinked copy). The dating
// pass sets lines, baseYear (of relative year 0) and first (undated: last).
type source struct {
	name     string
	file     *os.File
	lines    int
	baseYear int
	first    time.Time
}

// undated sorts a log without timestamps after the others.
var undated = time.Unix(1<<62, 0)

// NewReader returns a Reader with the given options.
func NewReader(opts Options) *Reader {
	if opts.Location == nil {
		opts.Location = time.Local
	}
	return &Reader{opts: opts}
}

// ReadFile dates the lines of the log at path ("-": stdin; gzip
// recognised) for Messages or Each. Only I/O errors are returned.
func (r *Reader) ReadFile(path string) error {
	if path == "-" {
		return r.Read(path, os.Stdin, r.opts.End)
	}
	f, err := os.Open(path)
	if err != nil {
		return &OpenError{Path: path, Err: err}
	}
	end := r.opts.End
	if end.IsZero() {
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		end = fi.ModTime()
	}
	return r.add(&source{name: path, file: f}, end)
}

// Read is ReadFile of in, copied to an unlinked temporary file, named
// name and dated by end (zero: now).
func (r *Reader) Read(name string, in io.Reader, end time.Time) error {
	f, err := os.CreateTemp("", "ratelimitd-maillog-*")
	if err != nil {
		return fmt.Errorf("maillog: %s: %w", name, err)
	}
	os.Remove(f.Name()) // the open file stays readable
	if _, err = io.Copy(f, in); err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("maillog: %s: %w", name, err)
	}
	if end.IsZero() {
		end = time.Now()
	}
	return r.add(&source{name: name, file: f}, end)
}

// add runs the dating pass over src and registers it; it closes src's
// file on an error.
func (r *Reader) add(src *source, end time.Time) error {
	var d dater
	firstRel, lastRel := 0, 0
	var firstP, lastP time.Time
	n, dated := 0, 0
	err := eachLine(src.file, func(s string, long bool) bool {
		n++
		if long {
			return true
		}
		var st Stamp
		if IsEximLine(s) {
			st.Time, _, _ = parseEximStamp(s, r.opts.Location)
		} else {
			l, _ := ParseSyslogLine(s, r.opts.Location)
			st = l.Stamp
		}
		if st.Time.IsZero() {
			return true
		}
		dated++
		if !st.YearLess {
			if dated == 1 {
				src.first = st.Time
			}
			return true
		}
		rel := d.rel(st.Time)
		if dated == 1 {
			firstRel, firstP = rel, st.Time
		}
		lastRel, lastP = rel, st.Time
		return true
	})
	if err != nil {
		src.file.Close()
		return fmt.Errorf("maillog: %s: %w", src.name, err)
	}
	src.lines = n
	if src.first.IsZero() {
		src.first = undated
	}
	if !lastP.IsZero() {
		limit := end.Add(24 * time.Hour)
		year := end.In(lastP.Location()).Year() + 1
		for ; year > 1970 && withYear(lastP, year).After(limit); year-- {
		}
		src.baseYear = year - lastRel
		if !firstP.IsZero() {
			src.first = withYear(firstP, src.baseYear+firstRel)
		}
	}
	r.stats.Files++
	r.stats.Lines += n
	r.sources = append(r.sources, src)
	return nil
}

// eachLine calls fn with every line of in (gunzipped) until fn returns
// false; long marks a line over maxLine.
func eachLine(in io.Reader, fn func(s string, long bool) bool) error {
	br := bufio.NewReaderSize(in, 64<<10)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return err
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	return newLineReader(br, Position{}, true).lines(func(line []byte, long bool, _ Position) bool {
		return fn(string(line), long)
	})
}

const halfYear = 183 * 24 * time.Hour

// dater gives year-less timestamps, in file order, their year relative to
// the file's first: a new year where time goes back by over half a year;
// a line over half a year ahead is a late one of the year before.
type dater struct {
	cur  int
	prev time.Time
}

func (d *dater) rel(p time.Time) int {
	switch {
	case d.prev.IsZero():
		d.prev = p
	case p.Before(d.prev.Add(-halfYear)):
		d.cur++
		d.prev = p
	case p.After(d.prev.Add(halfYear)):
		return d.cur - 1
	default:
		d.prev = p
	}
	return d.cur
}

func withYear(t time.Time, year int) time.Time {
	return time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
}

// Messages is Each collecting the messages, in Queued order.
func (r *Reader) Messages() []Message {
	var out []Message
	r.Each(func(m *Message) error {
		out = append(out, *m)
		return nil
	})
	slices.SortStableFunc(out, func(a, b Message) int { return byQueued(&a, &b) })
	return out
}

// join reads src's lines, dates them and feeds them to j.
func (r *Reader) join(src *source, j *joiner) error {
	if _, err := src.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	var d dater
	n := 0
	sample := func(problem, text string) {
		r.unparsable(fmt.Sprintf("%s:%d: %s: %q", src.name, n, problem, trunc(text, 120)))
	}
	return eachLine(src.file, func(s string, long bool) bool {
		n++
		if n > src.lines {
			return false // appended after the dating pass
		}
		if long {
			sample("line longer than 64 KiB", "")
			return true
		}
		if n == 1 {
			s = strings.TrimPrefix(s, "\ufeff")
		}
		if strings.TrimSpace(s) == "" {
			return true
		}
		if IsEximLine(s) {
			t, rec, err := ParseExim(s, r.opts.Location)
			switch {
			case errors.Is(err, ErrNotExim):
			case err != nil:
				sample(err.Error(), s)
			default:
				return j.add(t.UTC(), "", &rec)
			}
			return true
		}
		l, err := ParseSyslogLine(s, r.opts.Location)
		t := l.Stamp.Time
		if l.Stamp.YearLess { // dated as the dating pass did, malformed or not
			t = withYear(t, src.baseYear+d.rel(t))
		}
		if err != nil {
			sample(err.Error(), s)
			return true
		}
		rec, err := ParsePostfix(l.Msg)
		if errors.Is(err, ErrNotPostfix) || err == nil && rec.Kind == KindOther {
			return true
		}
		if !strings.Contains(l.Program, "postfix") && rec.Kind != KindNoQueue {
			// Another program's note about a queue ID (amavis, opendkim).
			return true
		}
		if err != nil {
			sample(err.Error(), s)
			return true
		}
		return j.add(t.UTC(), strings.ToLower(l.Host), &rec)
	})
}

// add applies a record of host's at t and hands on finished messages;
// false once fn failed.
func (j *joiner) add(t time.Time, host string, rec *Record) bool {
	j.apply(t, host, rec)
	j.advance(t)
	return j.err == nil
}

// apply applies a record of host's at t to its message.
func (j *joiner) apply(t time.Time, host string, rec *Record) {
	k := qkey{host, rec.QueueID}
	switch rec.Kind {
	case KindNoQueue:
		j.st.NoQueue++
		return
	case KindClient, KindPickup, KindArrival:
		// A first line: what is open under this queue ID is earlier mail.
		j.finish(k)
	}
	m := j.open[k]
	if m == nil {
		j.seq++
		k.host, k.id = strings.Clone(k.host), strings.Clone(k.id)
		m = &Message{Host: k.host, QueueID: k.id, seq: j.seq}
		j.open[k] = m
	}
	m.seen = t
	c := strings.Clone
	switch rec.Kind {
	case KindClient:
		m.smtp = true
		m.Received = t
		m.ClientName, m.ClientAddress = c(rec.ClientName), c(rec.ClientAddress)
		m.SASLMethod, m.SASLUsername = c(rec.SASLMethod), c(rec.SASLUsername)
	case KindPickup:
		m.local = true
		m.Received = t
		m.Sender = c(rec.Sender)
	case KindArrival:
		// Local submissions count (acl_not_smtp); Exim's bounces do not.
		m.smtp, m.queued, m.local = !rec.Bounce, true, rec.Bounce
		m.Received, m.Queued = t, t
		m.ClientName, m.ClientAddress = c(rec.ClientName), c(rec.ClientAddress)
		m.SASLMethod, m.SASLUsername = c(rec.SASLMethod), c(rec.SASLUsername)
		m.Sender, m.Size, m.MessageID = c(rec.Sender), rec.Size, c(rec.MessageID)
		for _, a := range rec.Recipients {
			m.addRecipient(a)
		}
	case KindMessageID:
		m.MessageID = c(rec.MessageID)
		if m.Queued.IsZero() {
			m.Queued = t
		}
	case KindFrom:
		m.queued = true
		if m.Sender != rec.Sender {
			m.Sender = c(rec.Sender)
		}
		m.Size = rec.Size
		m.NRcpt = max(m.NRcpt, rec.NRcpt)
		if m.Queued.IsZero() {
			m.Queued = t
		}
	case KindTo:
		m.addRecipient(rec.Recipient)
		m.addOutcome(t, rec)
	case KindReject:
		if rec.Reject != "RCPT" {
			m.rejected = true
		}
		m.addOutcome(t, rec)
	case KindHold:
		// Held before qmgr saw it; from= follows if it is released.
		m.held = true
		if m.Sender == "" {
			m.Sender = c(rec.Sender)
		}
		m.addRecipient(rec.Recipient)
		if m.Queued.IsZero() {
			m.Queued = t
		}
	case KindRemoved, KindCompleted:
		j.finish(k)
	}
}

// addOutcome adds the outcome rec reports at t, once per recipient and kind.
func (m *Message) addOutcome(t time.Time, rec *Record) {
	k, ok := rec.Outcome()
	if ok && rec.Recipient != "" && !slices.ContainsFunc(m.Outcomes, func(o Outcome) bool {
		return o.Kind == k && strings.EqualFold(o.Recipient, rec.Recipient)
	}) {
		m.Outcomes = append(m.Outcomes, Outcome{Time: t, Recipient: strings.Clone(rec.Recipient), Kind: k})
	}
}

func (m *Message) addRecipient(a string) {
	if a != "" && !slices.ContainsFunc(m.Recipients, func(x string) bool { return strings.EqualFold(x, a) }) {
		m.Recipients = append(m.Recipients, strings.Clone(a))
	}
}

// Stats returns the counts so far.
func (r *Reader) Stats() Stats { return r.stats }

// WriteSummary writes the summary `trace from-maillog` prints on stderr.
func (s Stats) WriteSummary(w io.Writer) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%d messages (%d recipients) from %d senders", s.Messages, s.Recipients, s.Senders)
	if s.Messages > 0 {
		fmt.Fprintf(&b, ", %s to %s (%s)", s.Start.Format(time.RFC3339), s.End.Format(time.RFC3339), human.Span(s.End.Sub(s.Start)))
	}
	fmt.Fprintf(&b, "\nread %d lines in %d files", s.Lines, s.Files)
	if s.Unparsable > 0 {
		fmt.Fprintf(&b, "; %d lines unparsable (not counted), e.g.:\n  %s", s.Unparsable, strings.Join(s.Samples, "\n  "))
	}
	b.WriteByte('\n')
	if s.Outcomes > 0 {
		fmt.Fprintf(&b, "%s (bounces, deferrals, unknown recipients) in the trace for outcome limits\n", plural.N(s.Outcomes, "recipient outcome"))
	}
	if s.Held > 0 {
		fmt.Fprintf(&b, "%d messages on hold and never released are in the trace without a size\n", s.Held)
	}
	var left []string
	for _, c := range []struct {
		n    int
		what string
	}{{s.NotSMTP, "not received over SMTP (pickup, bounces)"}, {s.Incomplete, "incomplete in these logs"},
		{s.Rejected, "rejected after they had a queue ID"}, {s.NoQueue, "NOQUEUE rejections"}} {
		if c.n > 0 {
			left = append(left, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if len(left) > 0 {
		fmt.Fprintf(&b, "left out: %s\n", strings.Join(left, ", "))
	}
	_, err := w.Write(b.Bytes())
	return err
}
