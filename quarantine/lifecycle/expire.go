package lifecycle

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// Expire drops thawed messages past KeepThawed, applies ExpireAction past
// MaxAge (if set), removes older audit records and counts the outcomes.
func (s *Service) Expire(ctx context.Context, now time.Time) {
	if n, err := s.q.SweepThawed(now.Add(-s.opts.KeepThawed)); err != nil {
		s.failed("expire", err, "quarantine expiry: sweeping thawed messages failed")
	} else if n > 0 {
		s.log.Info("quarantine expiry: thawed messages past keep_thawed dropped", "messages", n,
			"keep_thawed", human.Duration(s.opts.KeepThawed))
	}
	maxAge := s.opts.MaxAge
	if maxAge <= 0 {
		return
	}
	old, err := s.q.List(quarantine.Filter{Before: now.Add(-maxAge), OldestFirst: true})
	if err != nil {
		s.failed("expire", err, "quarantine expiry: listing failed")
		return
	}
	kept := 0
	for _, e := range old {
		if ctx.Err() != nil {
			break
		}
		outcome, detail, err := s.expireOne(ctx, e, now)
		if err != nil {
			outcome, detail = "failed", "kept: "+termsafe.Line(err.Error())
			s.failed("expire", err, "quarantine expiry: message past max_age kept (it may still be in the MTA's queue)",
				"id", e.ID, "state", e.State.String(), "sender", e.Sender, "key", e.Key, "queue_id", e.QueueID)
		}
		s.m.expired.WithLabelValues(outcome).Inc()
		if outcome == "failed" || outcome == "kept" {
			kept++
			if outcome == "kept" {
				s.log.Warn("quarantine expiry: message past max_age "+detail, "id", e.ID, "state", e.State.String(),
					"sender", e.Sender, "key", e.Key)
			}
			if nerr := s.q.Note(e.ID, "past max_age, "+detail); nerr != nil {
				s.log.Error("quarantine expiry: flagging an entry failed", "id", e.ID, "err", nerr)
			}
			continue
		}
		s.forget(e.Key)
		s.log.Info("quarantine expiry: message past max_age "+detail, "id", e.ID, "state", e.State.String(),
			"sender", e.Sender, "key", e.Key, "queue_id", e.QueueID, "max_age", human.Duration(maxAge))
		e.State = quarantine.Deleted
		s.emit(ctx, Expired, e, "expiry", detail)
	}
	s.m.keptPastAge.Set(float64(kept))
	s.mu.Lock()
	s.health.KeptPastMaxAge = kept
	s.mu.Unlock()
	n, bytes, err := s.q.Expire(now, maxAge)
	if err != nil {
		s.failed("expire", err, "quarantine expiry of audit records failed")
	} else if n > 0 {
		s.log.Info("quarantine audit records expired", "count", n, "bytes", bytes, "max_age", human.Duration(maxAge))
	}
}

// expireOne returns the outcome label and a detail, or why e was kept.
func (s *Service) expireOne(ctx context.Context, e quarantine.Entry, now time.Time) (outcome, detail string, err error) {
	if s.opts.ExpireAction == ExpireKeep {
		return "kept", "kept (expire_action = keep)", nil
	}
	if e, err = s.q.Claim(e.ID, s.token, false, false); err != nil {
		return "", "", err
	}
	done := false // past the point where the claim must go
	defer func() {
		if err != nil && !done {
			s.q.Unclaim(e.ID, s.token, "")
		}
	}()
	if e, err = s.confirmHeld(ctx, e); err != nil {
		return "", "", err
	}
	outcome, detail = "bounced", "returned to the sender"
	switch {
	case e.State == quarantine.Held && e.QueueID == "":
		return "", "", errNoQueueID
	case e.State == quarantine.Held:
		var warn error
		if warn, err = s.releaseHeld(ctx, "expire", s.queue.Expire, e.QueueID); err == nil && warn != nil {
			detail += " (" + warn.Error() + ")"
		}
	case e.Sender == "":
		outcome, detail = "deleted_null_sender", "deleted: null sender, no DSN"
	default:
		err, detail = s.sendDSN(ctx, e, now), "returned to the sender with a DSN"
	}
	if err != nil {
		return "", "", err
	}
	done = true
	if err := s.q.Delete(e.ID); err != nil {
		return "", "", fmt.Errorf("returned to the sender, but recording it failed: %w", err)
	}
	return outcome, detail, nil
}

func (s *Service) sendDSN(ctx context.Context, e quarantine.Entry, now time.Time) error {
	if s.opts.Reinjector == nil {
		return fmt.Errorf("lifecycle: no re-injection listener configured for the DSN")
	}
	msg, err := s.q.Message(e.ID)
	if err != nil {
		return err
	}
	dsn, err := buildDSN(s.opts.ReportingMTA, e, msg, now, s.opts.MaxAge)
	if err != nil {
		return err
	}
	if _, err := s.opts.Reinjector.Reinject(ctx, "", []string{e.Sender}, "", dsn); err != nil {
		s.fail("dsn", err)
		return fmt.Errorf("sending the DSN to <%s>: %w", e.Sender, err)
	}
	return nil
}

// buildDSN returns an RFC 3464 DSN (5.4.7, RFC 3463) telling e.Sender
// that original was not delivered within maxAge. Errors: go-message's.
func buildDSN(reportingMTA string, e quarantine.Entry, original []byte, now time.Time, maxAge time.Duration) ([]byte, error) {
	reportingMTA = cmp.Or(headerValue(reportingMTA), "localhost")
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

	var text strings.Builder
	fmt.Fprintf(&text, "This is the mail system at host %s.\r\n\r\n", reportingMTA)
	fmt.Fprintf(&text, "Your message to %s was stopped by a sending rate limit (%s) on %s\r\n",
		headerValue(strings.Join(e.Recipients, ", ")), headerValue(e.Limit), e.Created.UTC().Format(time.RFC1123Z))
	fmt.Fprintf(&text, "and was not released by the postmaster within %s. It has not been delivered.\r\n", human.Duration(maxAge))
	if e.Subject != "" {
		fmt.Fprintf(&text, "\r\nSubject: %s\r\n", headerValue(e.Subject))
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

	var buf bytes.Buffer
	w, err := message.CreateWriter(&buf, h.Header)
	if err != nil {
		return nil, err
	}
	for _, p := range []struct {
		ct     string
		params map[string]string
		body   string
	}{
		{"text/plain", map[string]string{"charset": "utf-8"}, text.String()},
		{"message/delivery-status", nil, st.String()},
		{"text/rfc822-headers", nil, headerOf(original)},
	} {
		var ph message.Header
		ph.SetContentType(p.ct, p.params)
		pw, err := w.CreatePart(ph)
		if err == nil {
			_, err = io.WriteString(pw, p.body)
		}
		if err == nil {
			err = pw.Close()
		}
		if err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// headerOf returns msg's header fields (all of msg if no body), in CRLF.
func headerOf(msg []byte) string {
	h := strings.ReplaceAll(string(msg), "\r\n", "\n")
	if i := strings.Index(h, "\n\n"); i >= 0 {
		h = h[:i+1]
	}
	return strings.ReplaceAll(h, "\n", "\r\n")
}

func headerValue(s string) string {
	return mta.ReplyText(s, 900)
}
