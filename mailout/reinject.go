// Package mailout sends ratelimitd's own mail over SMTP (RFC 5321):
// re-injected thawed messages, DSNs (RFC 3464) and notify's mail, to an
// MTA listener that neither rate-limits nor runs milters. Errors are
// prefixed "mailout:" and wrap the *gosmtp.SMTPError or network error.
package mailout

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"

	gosmtp "github.com/emersion/go-smtp"
)

// Reinjector delivers messages to one SMTP address. Reinject is safe for
// concurrent use (a connection each); fields must not change meanwhile.
type Reinjector struct {
	Addr string // host:port
	Helo string // EHLO name; "" means "localhost"
	// Timeout bounds the whole transaction; 0 means 60 s.
	Timeout time.Duration
	// StartTLS requires STARTTLS (RFC 3207), verifying the certificate
	// for Addr's host; the EHLO then says "localhost".
	StartTLS bool
}

// ErrNoRecipients: Reinject of an envelope without recipients.
var ErrNoRecipients = errors.New("mailout: no recipients")

// Reinject sends msg from sender ("" is <>) to rcpts, prepending header
// ("Name: value" without line end, or ""). Once the data got 250 it
// returns that reply's text (after the code, e.g. "2.0.0 Ok: queued as
// 4XbY1z3kQ9z9"; QueuedAs finds the ID) and a nil error, whatever QUIT
// says; ctx's end closes the connection.
func (r *Reinjector) Reinject(ctx context.Context, sender string, rcpts []string, header string, msg []byte) (string, error) {
	if len(rcpts) == 0 {
		return "", ErrNoRecipients
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(max(r.Timeout, 0), time.Minute))
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", r.Addr)
	if err != nil {
		return "", fmt.Errorf("mailout: re-inject to %s: %w", r.Addr, err)
	}
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	var c *gosmtp.Client
	if r.StartTLS {
		host, _, _ := net.SplitHostPort(r.Addr)
		if c, err = gosmtp.NewClientStartTLS(conn, &tls.Config{ServerName: host}); err != nil {
			conn.Close()
			return "", fmt.Errorf("mailout: re-inject STARTTLS: %w", err)
		}
	} else {
		c = gosmtp.NewClient(conn)
		if err := c.Hello(cmp.Or(r.Helo, "localhost")); err != nil {
			c.Close()
			return "", fmt.Errorf("mailout: re-inject EHLO: %w", err)
		}
	}
	defer c.Close()
	if err := c.Mail(sender, nil); err != nil {
		return "", fmt.Errorf("mailout: re-inject MAIL FROM:<%s>: %w", sender, err)
	}
	for _, rc := range rcpts {
		if err := c.Rcpt(rc, nil); err != nil {
			return "", fmt.Errorf("mailout: re-inject RCPT TO:<%s>: %w", rc, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return "", fmt.Errorf("mailout: re-inject DATA: %w", err)
	}
	if header != "" {
		if _, err := w.Write([]byte(header + "\r\n")); err != nil {
			return "", fmt.Errorf("mailout: re-inject: %w", err)
		}
	}
	if _, err := w.Write(msg); err != nil {
		return "", fmt.Errorf("mailout: re-inject: %w", err)
	}
	if !bytes.HasSuffix(msg, []byte("\n")) {
		w.Write([]byte("\r\n"))
	}
	resp, err := w.CloseWithResponse()
	if err != nil {
		return "", fmt.Errorf("mailout: re-inject end of data: %w", err)
	}
	// 250 after the data: the server has it (RFC 5321 4.1.1.4).
	_ = c.Quit()
	return resp.StatusText, nil
}

// QueuedAs returns the queue ID in a 250 reply to the data: Postfix's
// ("2.0.0 Ok: queued as 4XbY1z3kQ9z9", cleanup(8)'s ID) or Exim's ("OK
// id=1tGxyZ-000abc-Qr", spec chapter 4.4); "" when it names none.
func QueuedAs(reply string) string {
	for _, re := range queuedAs {
		// At most 32 characters: Postfix's long IDs have 20 at most, Exim's 23.
		if m := re.FindStringSubmatch(reply); m != nil && m[1] != "" && len(m[1]) <= 32 {
			return m[1]
		}
	}
	return ""
}

// queuedAs finds the ID after the first mark, Postfix's before Exim's.
var queuedAs = []*regexp.Regexp{regexp.MustCompile(`queued as ([0-9A-Za-z-]*)`), regexp.MustCompile(`id=([0-9A-Za-z-]*)`)}
