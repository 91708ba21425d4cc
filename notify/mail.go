package notify

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"text/template"
	"time"

	"github.com/emersion/go-message/mail"
	gosmtp "github.com/emersion/go-smtp"
)

// BuildMail returns the RFC 5322 message for e: From from, To to, Subject
// and a text/plain UTF-8 body from the templates (the subject's line breaks
// become spaces), a Date, a Message-ID and an "Auto-Submitted:
// auto-generated" header (RFC 3834) so that vacation responders stay quiet.
func BuildMail(from string, to []string, subject, body *template.Template, e Event) ([]byte, error) {
	var s, b bytes.Buffer
	if err := subject.Execute(&s, e); err != nil {
		return nil, fmt.Errorf("subject template: %w", err)
	}
	if err := body.Execute(&b, e); err != nil {
		return nil, fmt.Errorf("body template: %w", err)
	}
	var h mail.Header
	h.SetDate(e.Time)
	h.SetSubject(strings.Join(strings.Fields(s.String()), " "))
	fa, err := mail.ParseAddress(from)
	if err != nil {
		fa = &mail.Address{Address: from}
	}
	h.SetAddressList("From", []*mail.Address{fa})
	tos := make([]*mail.Address, len(to))
	for i, t := range to {
		tos[i] = &mail.Address{Address: t}
	}
	h.SetAddressList("To", tos)
	if err := h.GenerateMessageID(); err != nil {
		return nil, err
	}
	h.Set("Auto-Submitted", "auto-generated")
	h.Set("X-Ratelimitd-Event", string(e.Kind))
	h.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
	var out bytes.Buffer
	w, err := mail.CreateSingleInlineWriter(&out, h)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(bytes.ReplaceAll(b.Bytes(), []byte("\n"), []byte("\r\n"))); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// sendMail sends e to the postmaster addresses, or with toSender to the
// event's envelope sender, through the relay. temporary reports a
// failure worth retrying: a network error or a 4xx reply.
func (n *Notifier) sendMail(ctx context.Context, e Event, toSender bool) (temporary bool, err error) {
	m := n.cfg.Mail
	to, subj, body := m.To, n.tmpl.subject, n.tmpl.body
	if toSender {
		to, subj, body = []string{e.Sender}, n.tmpl.senderSubject, n.tmpl.senderBody
	}
	msg, err := BuildMail(m.From, to, subj, body, e)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(m.Timeout))
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", m.Relay)
	if err != nil {
		return true, fmt.Errorf("mail relay %s: %w", m.Relay, err)
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	// Closing the connection when ctx ends (Close's deadline) interrupts
	// a stuck relay.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	step := func(what string, err error) (bool, error) {
		var se *gosmtp.SMTPError
		if errors.As(err, &se) {
			return se.Code/100 == 4, fmt.Errorf("mail relay %s: %s: %w", m.Relay, what, err)
		}
		return true, fmt.Errorf("mail relay %s: %s: %w", m.Relay, what, err)
	}
	var c *gosmtp.Client
	if m.StartTLS {
		host, _, _ := net.SplitHostPort(m.Relay)
		if c, err = gosmtp.NewClientStartTLS(conn, &tls.Config{ServerName: host}); err != nil {
			conn.Close()
			return step("STARTTLS", err)
		}
	} else {
		c = gosmtp.NewClient(conn)
		if err := c.Hello(m.Helo); err != nil {
			c.Close()
			return step("EHLO", err)
		}
	}
	defer c.Close()
	if err := c.Mail(envelope(m.From), nil); err != nil {
		return step("MAIL FROM", err)
	}
	for _, r := range to {
		if err := c.Rcpt(r, nil); err != nil {
			return step("RCPT TO:<"+r+">", err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return step("DATA", err)
	}
	if _, err := w.Write(msg); err != nil {
		return step("DATA", err)
	}
	if err := w.Close(); err != nil {
		return step("end of DATA", err)
	}
	// The relay has the message (250 after DATA); a failed QUIT changes
	// nothing.
	c.Quit()
	return false, nil
}

// envelope extracts the address of a From value such as
// "ratelimitd <ratelimitd@example.org>".
func envelope(from string) string {
	if a, err := mail.ParseAddress(from); err == nil {
		return a.Address
	}
	return from
}
