package notify

import (
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"text/template"
	"time"

	"github.com/emersion/go-message/mail"
	gosmtp "github.com/emersion/go-smtp"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/mailout"
)

// SignatureHeader carries "sha256=" and the hex HMAC-SHA256 (RFC 2104) of
// the body under webhook.secret; EventHeader carries the Kind.
const (
	SignatureHeader = "X-Ratelimitd-Signature"
	EventHeader     = "X-Ratelimitd-Event"
)

// Payload is the JSON object POSTed: the Event, PeriodText and Summary.
type Payload struct {
	Event
	Period  string `json:"period,omitempty"`
	Summary string `json:"summary"`
}

// NewPayload returns e's payload: Time in UTC, Rate to two decimals.
func NewPayload(e Event) Payload {
	e.Time = e.Time.UTC()
	e.Rate = math.Round(e.Rate*100) / 100
	return Payload{Event: e, Period: e.PeriodText(), Summary: e.Summary()}
}

// Sign returns the value of SignatureHeader for body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// postWebhook sends e once; temporary: network error, 408, 429 or 5xx.
func (n *Notifier) postWebhook(ctx context.Context, e Event) (temporary bool, err error) {
	body, err := json.Marshal(NewPayload(e))
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n.cfg.Webhook.Timeout))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.Webhook.URL, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ratelimitd")
	req.Header.Set(EventHeader, string(e.Kind))
	if n.cfg.Webhook.Secret != "" {
		req.Header.Set(SignatureHeader, Sign([]byte(n.cfg.Webhook.Secret), body))
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return true, fmt.Errorf("webhook %s: %w", redact(n.cfg.Webhook.URL), err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 == 2 {
		return false, nil
	}
	temp := resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout
	return temp, fmt.Errorf("%w %s", ErrStatus, resp.Status)
}

// redact drops a URL's user information and query (tokens) for logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	if u.RawQuery != "" || u.ForceQuery {
		u.RawQuery, u.ForceQuery = "…", false
	}
	return u.String()
}

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
	_, err = io.WriteString(w, strings.ReplaceAll(termsafe.Text(b.String()), "\n", "\r\n"))
	if err = cmp.Or(err, w.Close()); err != nil {
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
