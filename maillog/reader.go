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
	Received, Queued          time.Time
	ClientName, ClientAddress string
	SASLMethod, SASLUsername  string
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
	MessageID  string

	smtp, queued, rejected, local, held bool
	seq                                 int
}

// RecipientCount is the message's number of recipients: qmgr's nrcpt or
// the distinct recipients seen, whichever is larger.
func (m *Message) RecipientCount() int { return max(m.NRcpt, len(m.Recipients)) }

// Reader reads mail logs and joins their lines into messages. Read the
// files in any order (rotated, .gz); the lines are put in time order before
// they are joined. A Reader is not safe for concurrent use.
type Reader struct {
	opts    Options
	recs    []timedRecord
	stats   Stats
	fileSeq int
}

type timedRecord struct {
	t    time.Time
	file int
	line int
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

// ReadFile reads the log at path ("-" is standard input); a gzip file
// (rotated logs, .gz) is recognised by its magic bytes. Only I/O errors are
// returned: unparsable lines are counted in Stats.
func (r *Reader) ReadFile(path string) error {
	end := r.opts.End
	var in io.Reader
	if path == "-" {
		in = os.Stdin
		if end.IsZero() {
			end = time.Now()
		}
	} else {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if end.IsZero() {
			fi, err := f.Stat()
			if err != nil {
				return err
			}
			end = fi.ModTime()
		}
		in = f
	}
	return r.Read(path, in, end)
}

// Read reads one log from in; name is used in Stats.Samples, end dates
// year-less timestamps (see Options.End). A gzip stream is decompressed.
func (r *Reader) Read(name string, in io.Reader, end time.Time) error {
	br := bufio.NewReaderSize(in, 64<<10)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("maillog: %s: %w", name, err)
		}
		defer gz.Close()
		br = bufio.NewReaderSize(gz, 64<<10)
	}
	r.stats.Files++
	r.fileSeq++
	fr := fileReader{r: r, name: name, file: r.fileSeq}
	n := 0
	for {
		line, err := readLine(br)
		if len(line) > 0 || err == nil {
			n++
			fr.line(n, line, err == errLong)
		}
		if err == io.EOF {
			break
		}
		if err != nil && err != errLong {
			return fmt.Errorf("maillog: %s: %w", name, err)
		}
	}
	fr.resolveYears(end)
	return nil
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
			buf = buf[:0]
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

// fileReader parses the lines of one file and dates them.
type fileReader struct {
	r    *Reader
	name string
	file int
	// Year-less records of this file: index into r.recs and relative year.
	yearless []int
	rels     []int
	rel      int
	prev     time.Time // last year-less placeholder time
}

func (fr *fileReader) unparsable(n int, problem, text string) {
	st := &fr.r.stats
	st.Unparsable++
	if len(st.Samples) < fr.r.opts.MaxSamples {
		st.Samples = append(st.Samples, fmt.Sprintf("%s:%d: %s: %q", fr.name, n, problem, trunc(text, 120)))
	}
}

func (fr *fileReader) line(n int, s string, long bool) {
	r := fr.r
	r.stats.Lines++
	if long {
		fr.unparsable(n, "line longer than 64 KiB", "")
		return
	}
	if n == 1 {
		s = strings.TrimPrefix(s, "\ufeff")
	}
	if strings.TrimSpace(s) == "" {
		return
	}
	if IsEximLine(s) {
		t, rec, err := ParseExim(s, r.opts.Location)
		switch {
		case errors.Is(err, ErrNotExim):
		case err != nil:
			fr.unparsable(n, err.Error(), s)
		default:
			r.recs = append(r.recs, timedRecord{t: t.UTC(), file: fr.file, line: n, rec: rec})
		}
		return
	}
	l, err := ParseSyslogLine(s, r.opts.Location)
	if err != nil {
		fr.unparsable(n, err.Error(), s)
		return
	}
	rec, err := ParsePostfix(l.Msg)
	if errors.Is(err, ErrNotPostfix) || err == nil && rec.Kind == KindOther {
		return
	}
	if !strings.Contains(l.Program, "postfix") && rec.Kind != KindNoQueue {
		// Another program's note about a queue ID (amavis, opendkim).
		return
	}
	if err != nil {
		fr.unparsable(n, err.Error(), s)
		return
	}
	tr := timedRecord{t: l.Stamp.Time, file: fr.file, line: n, host: strings.ToLower(l.Host), rec: rec}
	if l.Stamp.YearLess {
		fr.dateYearless(l.Stamp.Time)
		fr.yearless = append(fr.yearless, len(r.recs))
	} else {
		tr.t = tr.t.UTC()
	}
	r.recs = append(r.recs, tr)
}

// halfYear is how far a year-less timestamp may go backwards before it is
// taken to be in the next year (or forwards, to be a late line of the
// previous one).
const halfYear = 183 * 24 * time.Hour

// dateYearless records the relative year of the next year-less line.
func (fr *fileReader) dateYearless(p time.Time) {
	rel := fr.rel
	switch {
	case fr.prev.IsZero():
		fr.prev = p
	case p.Before(fr.prev.Add(-halfYear)):
		fr.rel++ // e.g. Dec 31 → Jan 1
		rel = fr.rel
		fr.prev = p
	case p.After(fr.prev.Add(halfYear)):
		rel = fr.rel - 1 // a late line of the previous year
	default:
		fr.prev = p
	}
	fr.rels = append(fr.rels, rel)
}

// resolveYears gives this file's year-less records their year: the last
// one's is the latest year that puts it no later than end plus a day.
func (fr *fileReader) resolveYears(end time.Time) {
	if len(fr.yearless) == 0 {
		return
	}
	recs := fr.r.recs
	lastRel := fr.rels[len(fr.rels)-1]
	last := recs[fr.yearless[len(fr.yearless)-1]].t
	limit := end.Add(24 * time.Hour)
	year := end.In(last.Location()).Year() + 1
	for ; year > 1970; year-- {
		if !withYear(last, year).After(limit) {
			break
		}
	}
	for i, idx := range fr.yearless {
		recs[idx].t = withYear(recs[idx].t, year-(lastRel-fr.rels[i])).UTC()
	}
}

func withYear(t time.Time, year int) time.Time {
	return time.Date(year, t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), t.Location())
}

// Messages joins the records read so far and returns the messages that
// arrived over SMTP and were queued, in order of Queued time; it fills
// Stats. Call it once, after the last Read.
func (r *Reader) Messages() []Message {
	slices.SortStableFunc(r.recs, func(a, b timedRecord) int {
		return a.t.Compare(b.t)
	})
	type qkey struct{ host, id string }
	open := map[qkey]*Message{}
	var done []*Message
	seq := 0
	finish := func(k qkey) {
		if m := open[k]; m != nil {
			done = append(done, m)
			delete(open, k)
		}
	}
	get := func(k qkey) *Message {
		m := open[k]
		if m == nil {
			seq++
			m = &Message{Host: k.host, QueueID: k.id, seq: seq}
			open[k] = m
		}
		return m
	}
	for i := range r.recs {
		tr := &r.recs[i]
		rec := &tr.rec
		k := qkey{tr.host, rec.QueueID}
		switch rec.Kind {
		case KindNoQueue:
			r.stats.NoQueue++
			continue
		case KindClient, KindPickup, KindArrival:
			// The first line of a message: whatever is open under this
			// queue ID belongs to an earlier message (a queue ID reused,
			// a "removed" line not in the logs).
			finish(k)
		}
		m := get(k)
		switch rec.Kind {
		case KindClient:
			m.smtp = true
			m.Received = tr.t
			m.ClientName, m.ClientAddress = rec.ClientName, rec.ClientAddress
			m.SASLMethod, m.SASLUsername = rec.SASLMethod, rec.SASLUsername
		case KindPickup:
			m.local = true
			m.Received = tr.t
			m.Sender = rec.Sender
		case KindArrival:
			// Exim's own bounces are not submissions; local ones are
			// (acl_not_smtp may ask the policy service), keyed by U=.
			m.smtp, m.queued, m.local = !rec.Bounce, true, rec.Bounce
			m.Received, m.Queued = tr.t, tr.t
			m.ClientName, m.ClientAddress = rec.ClientName, rec.ClientAddress
			m.SASLMethod, m.SASLUsername = rec.SASLMethod, rec.SASLUsername
			m.Sender, m.Size, m.MessageID = rec.Sender, rec.Size, rec.MessageID
			for _, a := range rec.Recipients {
				m.addRecipient(a)
			}
		case KindMessageID:
			m.MessageID = rec.MessageID
			if m.Queued.IsZero() {
				m.Queued = tr.t
			}
		case KindFrom:
			m.queued = true
			m.Sender, m.Size = rec.Sender, rec.Size
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
				m.Sender = rec.Sender
			}
			m.addRecipient(rec.Recipient)
			if m.Queued.IsZero() {
				m.Queued = tr.t
			}
		case KindRemoved, KindCompleted:
			finish(k)
		}
	}
	for k := range open {
		finish(k)
	}
	slices.SortFunc(done, func(a, b *Message) int { return cmp.Compare(a.seq, b.seq) })
	var out []Message
	senders := map[string]bool{}
	st := &r.stats
	for _, m := range done {
		switch {
		case m.smtp && m.queued:
		case m.smtp && m.held && !m.rejected:
			st.Held++ // on hold, never released in these logs: still sent
		case m.rejected:
			st.Rejected++
			continue
		case m.local || m.queued && !m.smtp && m.Received.IsZero():
			st.NotSMTP++ // pickup, or made by Postfix itself (bounces)
			continue
		default:
			st.Incomplete++
			continue
		}
		if m.Received.IsZero() {
			m.Received = m.Queued
		}
		out = append(out, *m)
		st.Recipients += m.RecipientCount()
		senders[senderOf(m)] = true
		if st.Start.IsZero() || m.Queued.Before(st.Start) {
			st.Start = m.Queued
		}
		if m.Queued.After(st.End) {
			st.End = m.Queued
		}
	}
	slices.SortStableFunc(out, func(a, b Message) int { return a.Queued.Compare(b.Queued) })
	st.Messages, st.Senders = len(out), len(senders)
	r.recs = nil
	return out
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
	m.Recipients = append(m.Recipients, a)
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
		fmt.Fprintf(&b, ", %s to %s (%s)", s.Start.Format(time.RFC3339), s.End.Format(time.RFC3339), span(s.End.Sub(s.Start)))
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

// span prints a duration the way the summary shows time spans.
func span(d time.Duration) string {
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	case d >= time.Hour:
		return fmt.Sprintf("%.1f hours", d.Hours())
	}
	return d.Round(time.Second).String()
}
