package notify

import (
	"bytes"
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
	"time"
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
