package outcome

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/textproto"

	"github.com/ratelimitd/ratelimitd/maillog"
)

// Report is what a delivery status notification (RFC 3464) from Postfix
// says: the queue ID and sender of the message (X-Postfix-Queue-ID,
// X-Postfix-Sender) and each recipient's fate.
type Report struct {
	QueueID, Sender string
	Recipients      []RecipientStatus
}

// RecipientStatus is one per-recipient block: Final-Recipient (without
// "rfc822;"), Action ("failed", "delayed"), Status ("5.1.1") and
// Diagnostic-Code.
type RecipientStatus struct {
	Recipient, Action, Status, Diagnostic string
}

// Errors of ParseReport: ErrNotReport for a message without a
// message/delivery-status part (a transcript of a rejected session),
// ErrMalformedReport for one that cannot be read.
var (
	ErrNotReport       = errors.New("outcome: not a delivery status notification")
	ErrMalformedReport = errors.New("outcome: malformed delivery status notification")
)

// Bounds on what ParseReport reads.
const (
	maxReportParts      = 16
	maxReportRecipients = 1000
	maxReportBytes      = 1 << 20 // of the delivery-status part
)

// ParseReport reads an RFC 3464 report (multipart/report with a
// message/delivery-status part, RFC 6522) from r.
func ParseReport(r io.Reader) (Report, error) {
	e, err := message.Read(r)
	if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
		return Report{}, fmt.Errorf("%w: %v", ErrMalformedReport, err)
	}
	mr := e.MultipartReader()
	if mr == nil {
		return Report{}, ErrNotReport
	}
	for range maxReportParts {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
			return Report{}, fmt.Errorf("%w: %v", ErrMalformedReport, err)
		}
		t, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if t == "message/delivery-status" || t == "message/global-delivery-status" {
			return parseStatus(io.LimitReader(p.Body, maxReportBytes))
		}
	}
	return Report{}, ErrNotReport
}

// parseStatus reads the per-message, then the per-recipient fields.
func parseStatus(r io.Reader) (Report, error) {
	br := bufio.NewReader(r)
	h, err := textproto.ReadHeader(br)
	if err != nil {
		return Report{}, fmt.Errorf("%w: %v", ErrMalformedReport, err)
	}
	rep := Report{QueueID: strings.TrimSpace(h.Get("X-Postfix-Queue-ID")), Sender: addressOf(h.Get("X-Postfix-Sender"))}
	for len(rep.Recipients) < maxReportRecipients {
		if _, err := br.Peek(1); err != nil {
			break
		}
		h, err := textproto.ReadHeader(br)
		if err != nil {
			return rep, fmt.Errorf("%w: %v", ErrMalformedReport, err)
		}
		if !h.Has("Final-Recipient") {
			if h.Len() == 0 {
				continue
			}
			break
		}
		rep.Recipients = append(rep.Recipients, RecipientStatus{Recipient: addressOf(h.Get("Final-Recipient")),
			Action: strings.ToLower(strings.TrimSpace(h.Get("Action"))), Status: statusCode(h.Get("Status")),
			Diagnostic: strings.TrimSpace(h.Get("Diagnostic-Code"))})
	}
	if rep.QueueID == "" {
		return rep, fmt.Errorf("%w: no X-Postfix-Queue-ID", ErrMalformedReport)
	}
	return rep, nil
}

// addressOf returns the address of an RFC 3464 "type; address" field.
func addressOf(v string) string {
	if _, a, ok := strings.Cut(v, ";"); ok {
		v = a
	}
	return strings.Trim(strings.TrimSpace(v), "<>")
}

// statusCode returns a Status field's code ("5.1.1 (unknown user)": "5.1.1").
func statusCode(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.IndexAny(v, " \t("); i >= 0 {
		v = v[:i]
	}
	return v
}

// Outcomes returns what rep says for the outcome limits: a "failed" or
// "delayed" recipient's maillog.FailureOutcome, refined by the diagnostic.
func (rep Report) Outcomes() []Outcome {
	var out []Outcome
	for _, rs := range rep.Recipients {
		if rs.Recipient == "" || rs.Action != "failed" && rs.Action != "delayed" {
			continue
		}
		if kind, ok := maillog.FailureOutcome(rs.Action == "failed", maillog.RefineDSN(rs.Status, rs.Diagnostic)); ok {
			out = append(out, Outcome{QueueID: rep.QueueID, Recipient: rs.Recipient, Kind: kind})
		}
	}
	return out
}
