package maillog

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
)

// Options configures a Reader. The zero value reads classic timestamps in
// the local time zone and dates each file by its modification time.
type Options struct {
	// Location is the time zone of timestamps without an offset (classic
	// syslog, Exim without log_timezone); nil means time.Local.
	Location *time.Location
	// End dates year-less (classic syslog) timestamps: each file's last
	// such line gets the latest year that puts it no later than End (plus
	// a day of slack), and earlier lines count back from it, a new year
	// starting wherever the month goes backwards (December → January).
	// Zero means the file's modification time (now for standard input).
	End time.Time
	// MaxSamples bounds Stats.Samples; 0 means 5.
	MaxSamples int
}

// maxLine is the longest log line read; longer ones are counted as
// unparsable and skipped.
const maxLine = 64 << 10

// Stats counts what a Reader read. Messages, Senders, Start and End
// describe the messages returned by Messages.
type Stats struct {
	// Files and Lines read.
	Files, Lines int
	// Unparsable lines: not a syslog or Exim line, or a line about a
	// message whose fields could not be parsed. Samples holds the first
	// few, as "FILE:LINE: problem: text".
	Unparsable int
	Samples    []string
	// Messages found, and distinct senders among them (the SASL user,
	// else the envelope sender).
	Messages, Senders int
	// Recipients summed over the messages.
	Recipients int
	// NotSMTP counts queued messages without an SMTP arrival
	// (Postfix pickup, bounces and other mail Postfix generates itself, or
	// whose smtpd line is in a log not read);
	// they are left out of the trace because no smtpd asked the policy
	// service about them.
	NotSMTP int
	// Incomplete counts messages whose log did not show both their
	// arrival (smtpd client= / Exim <=) and their queueing (qmgr from=),
	// e.g. because the log starts or ends in the middle of them. Rejected
	// counts messages with a queue ID that smtpd or cleanup then
	// rejected; NoQueue counts "NOQUEUE: reject" lines. None are in the
	// trace.
	Incomplete, Rejected, NoQueue int
	// Held counts messages put on hold (a policy service's HOLD, a
	// header_checks HOLD) and not released within the logs; they are in
	// the trace, with the sender and recipient of the hold line and no
	// size.
	Held int
	// Start and End are the times of the first and last message.
	Start, End time.Time
}

// Message is one message joined from its log lines: Postfix's smtpd
// client=/sasl_username=, cleanup's message-id=, qmgr's from=/size=/nrcpt=
// and the delivery agents' to= lines, by (host, queue ID); or Exim's <=
// line and its recipient lines, by message ID. A message qmgr retried
// after a deferral is still one message.
type Message struct {
	// Host is the syslog host name ("" for Exim's mainlog).
	Host string
	// QueueID is the Postfix queue ID or Exim message ID.
	QueueID string
	// Received is when the client was accepted (smtpd client= line; Exim
	// <=), and Queued when the message was complete (cleanup message-id=
	// or the first qmgr from=; Exim <=); both in UTC.
	Received, Queued time.Time
	// ClientName and ClientAddress are the SMTP client as smtpd logged it
	// (after XCLIENT: the address given there; "unknown" for a name that
	// did not resolve), or Exim's H=.
	ClientName, ClientAddress string
	// SASLMethod and SASLUsername are smtpd's sasl_method= and
	// sasl_username= (empty when the client did not authenticate), or
	// Exim's A= authenticator and id (U= for a local submission).
	SASLMethod, SASLUsername string
	// Sender is the envelope sender, "" for the null sender.
	Sender string
	// Size in bytes: qmgr's size= (the message with CRLF line ends and the
	// headers Postfix added, e.g. Received:), or Exim's S=.
	Size int64
	// NRcpt is the recipient count qmgr logged (0 for Exim).
	NRcpt int
	// Recipients are the distinct envelope recipients seen in delivery
	// lines (Postfix's orig_to= when present, Exim's <original>), in
	// order of first appearance.
	Recipients []string
	// MessageID is the Message-ID header's value without angle brackets
	// (cleanup's message-id=, Exim's id=).
	MessageID string

	smtp, queued, rejected, local, held bool
	seq                                 int
	seen                                time.Time // the time of its latest line
}

// RecipientCount is the message's number of recipients: qmgr's nrcpt or
// the distinct recipients seen, whichever is larger.
func (m *Message) RecipientCount() int { return max(m.NRcpt, len(m.Recipients)) }

// Reader reads mail logs and joins their lines into messages. Give it the
// files in any order (rotated, .gz): Messages reads them again in time
// order, joining as it goes, so memory grows with the messages, not the
// lines. A Reader is not safe for concurrent use.
type Reader struct {
	opts    Options
	sources []*source
	stats   Stats
}

// source is one log: a file read twice (dating, then joining), or data
// held in memory (standard input).
type source struct {
	name  string
	path  string // "" when data or spool holds the log
	data  []byte
	spool *os.File // an unlinked copy of standard input
	order int
	// From the dating pass: lines to read, the year of relative year 0 of
	// year-less stamps, and the first line's time (zero if none).
	lines    int
	baseYear int
	first    time.Time
}

type timedRecord struct {
	t    time.Time
	host string
	rec  Record
}

// NewReader returns a Reader with the given options.
func NewReader(opts Options) *Reader {
	if opts.Location == nil {
		opts.Location = time.Local
	}
	if opts.MaxSamples == 0 {
		opts.MaxSamples = 5
	}
	return &Reader{opts: opts}
}

// ReadFile reads the log at path ("-" is standard input, copied to an
// unlinked temporary file);
// a gzip file (rotated logs, .gz) is recognised by its magic bytes. It
// dates the file's lines now and joins them in Messages, which reads the
// file again (lines appended meanwhile are ignored). Only I/O errors are
// returned: unparsable lines are counted in Stats.
func (r *Reader) ReadFile(path string) error {
	if path == "-" {
		return r.readSpooled(path, os.Stdin)
	}
	f, err := os.Open(path)
	if err != nil {
		return &OpenError{Path: path, Err: err}
	}
	defer f.Close()
	end := r.opts.End
	if end.IsZero() {
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		end = fi.ModTime()
	}
	return r.add(&source{name: path, path: path}, f, end)
}

// Read reads one log from in, held in memory; name is used in
// Stats.Samples, end dates year-less timestamps (see Options.End; zero
// means now). A gzip stream is decompressed.
func (r *Reader) Read(name string, in io.Reader, end time.Time) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return fmt.Errorf("maillog: %s: %w", name, err)
	}
	if end.IsZero() {
		end = time.Now()
	}
	return r.add(&source{name: name, data: data}, bytes.NewReader(data), end)
}

// add runs the dating pass over src and registers it.
func (r *Reader) add(src *source, in io.Reader, end time.Time) error {
	src.order = len(r.sources)
	var d dater
	firstRel, lastRel := 0, 0
	var firstP, lastP time.Time
	n, dated := 0, 0
	err := eachLine(in, func(s string, long bool) bool {
		n++
		if long {
			return true
		}
		st, ok := stampOf(s, r.opts.Location)
		if !ok {
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
		return fmt.Errorf("maillog: %s: %w", src.name, err)
	}
	src.lines = n
	if !lastP.IsZero() {
		// The last year-less line gets the latest year that puts it no
		// later than end plus a day.
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

// stampOf returns the timestamp of a syslog or Exim line.
func stampOf(s string, loc *time.Location) (Stamp, bool) {
	if IsEximLine(s) {
		t, _, err := parseEximStamp(s, loc)
		return Stamp{Time: t}, err == nil
	}
	if strings.HasPrefix(s, "<") {
		if i := strings.IndexByte(s, '>'); i > 0 && i <= 4 {
			s = s[i+1:]
		}
	}
	st, _, err := parseStamp(s, loc)
	return st, err == nil
}

// eachLine calls fn with every line of in (gzip is decompressed), without
// its line end, until fn returns false; long reports a line longer than
// maxLine, skipped.
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
	for {
		line, err := readLine(br)
		if len(line) > 0 || err == nil || err == errLong {
			if !fn(line, err == errLong) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil && err != errLong {
			return err
		}
	}
}

var errLong = errors.New("line too long")

// readLine returns the next line without its end; errLong for a line
// longer than maxLine (skipped), io.EOF at the end.
func readLine(br *bufio.Reader) (string, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) <= maxLine {
			buf = append(buf, chunk...)
		} else {
			for err == bufio.ErrBufferFull {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && err != io.EOF {
				return "", err
			}
			return "", errLong
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		line := strings.TrimRight(string(buf), "\r\n")
		if err == io.EOF && len(buf) > 0 {
			return line, nil // the last line, without a newline
		}
		return line, err
	}
}

// halfYear is how far a year-less timestamp may go backwards before it is
// taken to be in the next year (or forwards, to be a late line of the
// previous one).
const halfYear = 183 * 24 * time.Hour

// dater gives year-less timestamps, in file order, their year relative to
// the file's first: a new year starts where the time goes back by more
// than half a year (December → January); a line more than half a year
// ahead is a late line of the previous year.
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

// Messages reads the logs again, oldest first, joins their lines and
// returns the messages that arrived over SMTP and were queued (or put on
// hold), in order of Queued time; it fills Stats. Call it once, after the
// last ReadFile or Read; it returns nil and counts an I/O error as an
// unparsable line should a file have become unreadable. It holds every
// message; Each streams them.
func (r *Reader) Messages() []Message {
	var out []Message
	r.Each(func(m *Message) error {
		out = append(out, *m)
		return nil
	})
	slices.SortStableFunc(out, func(a, b Message) int {
		if c := a.Queued.Compare(b.Queued); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// join reads src's lines, dates them and feeds them to j.
func (r *Reader) join(src *source, j *joiner) error {
	var in io.Reader
	switch {
	case src.spool != nil:
		if _, err := src.spool.Seek(0, io.SeekStart); err != nil {
			return err
		}
		in = src.spool
	case src.path == "":
		in = bytes.NewReader(src.data)
	default:
		f, err := os.Open(src.path)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	var d dater
	n := 0
	sample := func(problem, text string) {
		r.stats.Unparsable++
		if len(r.stats.Samples) < r.opts.MaxSamples {
			r.stats.Samples = append(r.stats.Samples, fmt.Sprintf("%s:%d: %s: %q", src.name, n, problem, trunc(text, 120)))
		}
	}
	return eachLine(in, func(s string, long bool) bool {
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
				return j.add(timedRecord{t: t.UTC(), rec: rec})
			}
			return true
		}
		l, err := ParseSyslogLine(s, r.opts.Location)
		// Date exactly the lines the dating pass dated (stampOf: every
		// line with a timestamp, parsable or not), in the same order, so
		// each gets the same relative year.
		rel := 0
		if l.Stamp.YearLess {
			rel = d.rel(l.Stamp.Time)
		}
		if err != nil {
			sample(err.Error(), s)
			return true
		}
		t := l.Stamp.Time
		if l.Stamp.YearLess {
			t = withYear(t, src.baseYear+rel)
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
		return j.add(timedRecord{t: t.UTC(), host: strings.ToLower(l.Host), rec: rec})
	})
}

// add applies one record to its message and hands on the messages it
// finishes; false once the consumer has failed (j.err).
func (j *joiner) add(tr timedRecord) bool {
	j.apply(tr)
	j.advance(tr.t)
	return j.err == nil
}

// apply applies one record to its message.
func (j *joiner) apply(tr timedRecord) {
	rec := &tr.rec
	k := qkey{tr.host, rec.QueueID}
	switch rec.Kind {
	case KindNoQueue:
		j.st.NoQueue++
		return
	case KindClient, KindPickup, KindArrival:
		// The first line of a message: whatever is open under this
		// queue ID belongs to an earlier message (a queue ID reused,
		// a "removed" line not in the logs).
		j.finish(k)
	}
	m := j.open[k]
	if m == nil {
		j.seq++
		k.host, k.id = strings.Clone(k.host), strings.Clone(k.id)
		m = &Message{Host: k.host, QueueID: k.id, seq: j.seq}
		j.open[k] = m
	}
	m.seen = tr.t
	c := strings.Clone
	switch rec.Kind {
	case KindClient:
		m.smtp = true
		m.Received = tr.t
		m.ClientName, m.ClientAddress = c(rec.ClientName), c(rec.ClientAddress)
		m.SASLMethod, m.SASLUsername = c(rec.SASLMethod), c(rec.SASLUsername)
	case KindPickup:
		m.local = true
		m.Received = tr.t
		m.Sender = c(rec.Sender)
	case KindArrival:
		// Exim's own bounces are not submissions; local ones are
		// (acl_not_smtp may ask the policy service), keyed by U=.
		m.smtp, m.queued, m.local = !rec.Bounce, true, rec.Bounce
		m.Received, m.Queued = tr.t, tr.t
		m.ClientName, m.ClientAddress = c(rec.ClientName), c(rec.ClientAddress)
		m.SASLMethod, m.SASLUsername = c(rec.SASLMethod), c(rec.SASLUsername)
		m.Sender, m.Size, m.MessageID = c(rec.Sender), rec.Size, c(rec.MessageID)
		for _, a := range rec.Recipients {
			m.addRecipient(a)
		}
	case KindMessageID:
		m.MessageID = c(rec.MessageID)
		if m.Queued.IsZero() {
			m.Queued = tr.t
		}
	case KindFrom:
		m.queued = true
		if m.Sender != rec.Sender {
			m.Sender = c(rec.Sender)
		}
		m.Size = rec.Size
		m.NRcpt = max(m.NRcpt, rec.NRcpt)
		if m.Queued.IsZero() {
			m.Queued = tr.t
		}
	case KindTo:
		m.addRecipient(rec.Recipient)
	case KindReject:
		if rec.Reject != "RCPT" {
			m.rejected = true
		}
	case KindHold:
		// Held before qmgr saw it: the sender and one recipient are
		// on this line; qmgr's from= follows if it is released.
		m.held = true
		if m.Sender == "" {
			m.Sender = c(rec.Sender)
		}
		m.addRecipient(rec.Recipient)
		if m.Queued.IsZero() {
			m.Queued = tr.t
		}
	case KindRemoved, KindCompleted:
		j.finish(k)
	}
}

func senderOf(m *Message) string {
	if m.SASLUsername != "" {
		return "user " + strings.ToLower(m.SASLUsername)
	}
	return "sender " + strings.ToLower(m.Sender)
}

func (m *Message) addRecipient(a string) {
	if a == "" {
		return
	}
	for _, x := range m.Recipients {
		if strings.EqualFold(x, a) {
			return
		}
	}
	m.Recipients = append(m.Recipients, strings.Clone(a))
}

// Stats returns the counts so far; Messages, Senders, Start and End are
// filled by Messages.
func (r *Reader) Stats() Stats { return r.stats }

// WriteSummary writes the one-paragraph summary `trace from-maillog`
// prints on standard error.
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
