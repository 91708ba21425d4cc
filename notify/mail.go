package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/template"
	"time"

	"github.com/emersion/go-message/mail"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/mailout"
)

// buildMail returns e's RFC 5322 text/plain message from the templates,
// Auto-Submitted (RFC 3834), subject and body cleaned by termsafe.
func buildMail(from string, to []string, subject, body *template.Template, e Event) ([]byte, error) {
	var s, b bytes.Buffer
	e = e.forMail()
	if err := subject.Execute(&s, e); err != nil {
		return nil, fmt.Errorf("subject template: %w", err)
	}
	if err := body.Execute(&b, e); err != nil {
		return nil, fmt.Errorf("body template: %w", err)
	}
	var h mail.Header
	h.SetDate(e.Time)
	h.SetSubject(termsafe.Line(strings.Join(strings.Fields(s.String()), " ")))
	h.SetAddressList("From", []*mail.Address{fromAddress(from)})
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
	text := termsafe.Text(b.String())
	if _, err := w.Write([]byte(strings.ReplaceAll(text, "\n", "\r\n"))); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// sendMail sends e (to its sender with toSender); temporary: network, 4xx.
func (n *Notifier) sendMail(ctx context.Context, e Event, toSender bool) (temporary bool, err error) {
	m := n.cfg.Mail
	to, prefix := m.To, ""
	if toSender {
		to, prefix = []string{e.Sender}, "sender_"
	}
	msg, err := buildMail(m.From, to, n.tmpl[prefix+"subject"], n.tmpl[prefix+"body"], e)
	if err != nil {
		return false, err
	}
	r := mailout.Reinjector{Addr: m.Relay, Helo: m.Helo, Timeout: time.Duration(m.Timeout), StartTLS: m.StartTLS}
	if _, err := r.Reinject(ctx, fromAddress(m.From).Address, to, "", msg); err != nil {
		var se *gosmtp.SMTPError
		return !errors.As(err, &se) || se.Code/100 == 4, fmt.Errorf("mail relay %s: %w", m.Relay, err)
	}
	return false, nil
}

// fromAddress is notify.mail.from parsed, or as it is if it does not parse.
func fromAddress(from string) *mail.Address {
	if a, err := mail.ParseAddress(from); err == nil {
		return a
	}
	return &mail.Address{Address: from}
}
