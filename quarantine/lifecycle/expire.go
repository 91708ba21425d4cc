package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// ExpireReport counts what one Expire run did.
type ExpireReport struct {
	// Bounced: returned to the sender (a DSN for frozen mail, the
	// expire commands for held mail). NullSender: frozen mail from <>
	// deleted without a DSN. Kept: past max_age but kept (expire_action
	// keep, no queue ID, or a bounce that failed). Purged: audit records
	// of thawed/deleted mail removed.
	Bounced, NullSender, Kept, Purged int
}

// Expire handles every held or frozen entry created more than MaxAge
// before now, then removes audit records older than MaxAge. With
// ExpireKeep, or when the message may still be in the MTA's queue and
// cannot be returned (no queue ID recorded, the expire command failed) or
// the DSN could not be sent, the entry is kept and flagged: its Error
// says why, an error is logged, and ratelimitd_quarantine_kept_past_max_age
// counts it. A record is never forgotten while its message may still
// exist. It does nothing when MaxAge is zero.
func (s *Service) Expire(ctx context.Context, now time.Time) ExpireReport {
	var r ExpireReport
	maxAge := s.opts.MaxAge
	if maxAge <= 0 {
		return r
	}
	old, err := s.q.List(quarantine.Filter{Before: now.Add(-maxAge), OldestFirst: true})
	if err != nil {
		s.fail("expire", err)
		s.log.Error("quarantine expiry: listing failed", "err", err)
		return r
	}
	for _, e := range old {
		if ctx.Err() != nil {
			break
		}
		outcome, detail, err := s.expireOne(ctx, e, now)
		switch {
		case err != nil:
			r.Kept++
			s.m.expired.WithLabelValues("failed").Inc()
			s.fail("expire", err)
			// Logged before the flag is stored: whoever sees the flag
			// finds the log line.
			s.log.Error("quarantine expiry: message past max_age kept (it may still be in the MTA's queue)", "id", e.ID,
				"state", e.State.String(), "sender", e.Sender, "key", e.Key, "queue_id", e.QueueID, "err", err)
			note := "past max_age, kept: " + quarantine.CleanLine(err.Error())
			if nerr := s.q.Note(e.ID, note); nerr != nil {
				s.log.Error("quarantine expiry: flagging an entry failed", "id", e.ID, "err", nerr)
			}
		case outcome == "kept":
			r.Kept++
			s.m.expired.WithLabelValues("kept").Inc()
			s.q.Note(e.ID, "past max_age, kept (expire_action = keep)")
			s.log.Warn("quarantine expiry: message past max_age kept (expire_action = keep)", "id", e.ID,
				"state", e.State.String(), "sender", e.Sender, "key", e.Key)
		default:
			if outcome == "bounced" {
				r.Bounced++
			} else {
				r.NullSender++
			}
			s.m.expired.WithLabelValues(outcome).Inc()
			s.forget(e.Key)
			s.log.Info("quarantine expiry: message past max_age "+detail, "id", e.ID, "state", e.State.String(),
				"sender", e.Sender, "key", e.Key, "queue_id", e.QueueID, "max_age", human.Duration(maxAge))
			e.State = quarantine.Deleted
			s.emit(ctx, Expired, e, "expiry", detail)
		}
	}
	s.m.keptPastAge.Set(float64(r.Kept))
	s.mu.Lock()
	s.health.KeptPastMaxAge = r.Kept
	s.mu.Unlock()
	n, bytes, err := s.q.Expire(now, maxAge)
	if err != nil {
		s.fail("expire", err)
		s.log.Error("quarantine expiry of audit records failed", "err", err)
	} else if n > 0 {
		r.Purged = n
		s.log.Info("quarantine audit records expired", "count", n, "bytes", bytes, "max_age", human.Duration(maxAge))
	}
	return r
}

// expireOne returns the outcome label ("bounced", "deleted_null_sender",
// "kept") and a log detail, or the error that kept the entry.
func (s *Service) expireOne(ctx context.Context, e quarantine.Entry, now time.Time) (string, string, error) {
	if s.opts.ExpireAction == ExpireKeep {
		return "kept", "kept", nil
	}
	e, err := s.q.Claim(e.ID, s.token, false)
	if err != nil {
		return "", "", err
	}
	if e, err = s.confirmHeld(ctx, e); err != nil {
		s.q.Unclaim(e.ID, s.token, "")
		return "", "", err
	}
	if e.State == quarantine.Held && e.QueueID == "" {
		s.q.Unclaim(e.ID, s.token, "")
		return "", "", errNoQueueID
	}
	outcome, detail := "bounced", "returned to the sender"
	switch e.State {
	case quarantine.Held:
		var warn error
		warn, err = s.releaseHeld(ctx, "expire", s.queue.Expire, e.QueueID)
		if err == nil && warn != nil {
			detail += " (" + warn.Error() + ")"
		}
	case quarantine.Frozen:
		if e.Sender == "" {
			outcome, detail = "deleted_null_sender", "deleted: null sender, no DSN"
			break
		}
		err = s.sendDSN(ctx, e, now)
		detail = "returned to the sender with a DSN"
	}
	if err != nil {
		s.q.Unclaim(e.ID, s.token, "")
		return "", "", err
	}
	if err := s.q.Delete(e.ID); err != nil {
		return "", "", fmt.Errorf("returned to the sender, but recording it failed: %w", err)
	}
	return outcome, detail, nil
}

// sendDSN builds a DSN for frozen entry e and sends it from the null
// sender to e.Sender through the re-injection listener.
func (s *Service) sendDSN(ctx context.Context, e quarantine.Entry, now time.Time) error {
	if s.opts.Reinjector == nil {
		return fmt.Errorf("lifecycle: no re-injection listener configured for the DSN")
	}
	msg, err := s.q.Message(e.ID)
	if err != nil {
		return err
	}
	host := s.opts.ReportingMTA
	if host == "" {
		host, _ = os.Hostname()
	}
	dsn, err := BuildDSN(host, e, msg, now, s.opts.MaxAge)
	if err != nil {
		return err
	}
	if err := s.opts.Reinjector.Reinject(ctx, "", []string{e.Sender}, "", dsn); err != nil {
		s.fail("dsn", err)
		return fmt.Errorf("sending the DSN to <%s>: %w", e.Sender, err)
	}
	return nil
}

// BuildDSN returns a delivery status notification (RFC 3464: a
// multipart/report; report-type=delivery-status with a text/plain
// explanation, a message/delivery-status part with one failed
// recipient block per recipient, Status 5.4.7 "delivery time expired"
// from RFC 3463, and the original header as text/rfc822-headers) telling
// e.Sender that the frozen message original was not delivered within
// maxAge. reportingMTA names this host. The DSN is built with
// github.com/emersion/go-message and uses CRLF line ends. Errors: those of
// go-message.
func BuildDSN(reportingMTA string, e quarantine.Entry, original []byte, now time.Time, maxAge time.Duration) ([]byte, error) {
	reportingMTA = headerValue(reportingMTA)
	if reportingMTA == "" {
		reportingMTA = "localhost"
	}
	var h mail.Header
	h.SetAddressList("From", []*mail.Address{{Name: "Mail Delivery System", Address: "MAILER-DAEMON@" + reportingMTA}})
	h.SetAddressList("To", []*mail.Address{{Address: e.Sender}})
	h.SetSubject("Undelivered Mail Returned to Sender")
	h.SetDate(now)
	if err := h.GenerateMessageIDWithHostname(reportingMTA); err != nil {
		return nil, err
	}
	h.Set("Auto-Submitted", "auto-replied") // RFC 3834
	h.SetContentType("multipart/report", map[string]string{"report-type": "delivery-status"})

	var buf bytes.Buffer
	w, err := message.CreateWriter(&buf, h.Header)
	if err != nil {
		return nil, err
	}
	part := func(ct string, params map[string]string, body string) error {
		var ph message.Header
		ph.SetContentType(ct, params)
		pw, err := w.CreatePart(ph)
		if err != nil {
			return err
		}
		if _, err := pw.Write([]byte(body)); err != nil {
			return err
		}
		return pw.Close()
	}
	var text strings.Builder
	fmt.Fprintf(&text, "This is the mail system at host %s.\r\n\r\n", reportingMTA)
	fmt.Fprintf(&text, "Your message to %s was stopped by a sending rate limit (%s) on %s\r\n",
		headerValue(strings.Join(e.Recipients, ", ")), headerValue(e.Limit), e.Created.UTC().Format(time.RFC1123Z))
	fmt.Fprintf(&text, "and was not released by the postmaster within %s. It has not been delivered.\r\n", human.Duration(maxAge))
	if e.Subject != "" {
		fmt.Fprintf(&text, "\r\nSubject: %s\r\n", headerValue(e.Subject))
	}
	if err := part("text/plain", map[string]string{"charset": "utf-8"}, text.String()); err != nil {
		return nil, err
	}
	var st strings.Builder
	fmt.Fprintf(&st, "Reporting-MTA: dns; %s\r\n", reportingMTA)
	if e.QueueID != "" {
		fmt.Fprintf(&st, "X-Ratelimitd-Queue-ID: %s\r\n", e.QueueID)
	}
	fmt.Fprintf(&st, "X-Ratelimitd-Quarantine-ID: %s\r\n", e.ID)
	fmt.Fprintf(&st, "Arrival-Date: %s\r\n", e.Created.UTC().Format(time.RFC1123Z))
	for _, rc := range e.Recipients {
		fmt.Fprintf(&st, "\r\nFinal-Recipient: rfc822; %s\r\nAction: failed\r\nStatus: 5.4.7\r\n"+
			"Diagnostic-Code: smtp; 550 5.4.7 message held by a rate limit expired after %s\r\nLast-Attempt-Date: %s\r\n",
			headerValue(rc), human.Duration(maxAge), now.UTC().Format(time.RFC1123Z))
	}
	if err := part("message/delivery-status", nil, st.String()); err != nil {
		return nil, err
	}
	if err := part("text/rfc822-headers", nil, headerOf(original)); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// headerOf returns the header of msg with CRLF line ends.
func headerOf(msg []byte) string {
	end := len(msg)
	if i := bytes.Index(msg, []byte("\r\n\r\n")); i >= 0 {
		end = i + 2
	} else if i := bytes.Index(msg, []byte("\n\n")); i >= 0 {
		end = i + 1
	}
	h := strings.ReplaceAll(string(msg[:end]), "\r\n", "\n")
	return strings.ReplaceAll(h, "\n", "\r\n")
}

// headerValue makes s safe inside one header or DSN field line.
func headerValue(s string) string {
	return mta.ReplyText(s, 900)
}
