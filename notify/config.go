package notify

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"text/template"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Config is the [notify] table. The zero value sends nothing: notifications
// are on when webhook.url or mail.to is set.
type Config struct {
	// Events lists the kinds sent (see Kinds); empty means all.
	Events []string `toml:"events"`
	// QueueSize bounds the events waiting to be sent; more are dropped and
	// counted. Default 1000.
	QueueSize int `toml:"queue_size"`
	// MaxKeys bounds the (limit, key) pairs remembered to send one
	// limit_refused per key, limit and period; when full (and nothing has
	// expired) further first refusals are dropped and counted rather than
	// sent twice. Default 100000.
	MaxKeys int `toml:"max_keys"`
	// Webhook is [notify.webhook].
	Webhook Webhook `toml:"webhook"`
	// Mail is [notify.mail].
	Mail Mail `toml:"mail"`
}

// Webhook is [notify.webhook]: each event is POSTed as one JSON object.
type Webhook struct {
	// URL is the http or https endpoint; "" disables the webhook.
	URL string `toml:"url"`
	// Secret, when set, signs each body: the header
	// X-Ratelimitd-Signature is "sha256=" and the hex HMAC-SHA256 of the
	// body with this key (RFC 2104).
	Secret string `toml:"secret"`
	// Retry: timeout (per attempt) default 10s.
	Retry
}

// Mail is [notify.mail]: mail to the postmaster (and optionally to the
// sender) through an SMTP relay.
type Mail struct {
	// Relay is the SMTP relay host:port, e.g. the local Postfix
	// "127.0.0.1:25". Default "127.0.0.1:25".
	Relay string `toml:"relay"`
	// Helo is the EHLO name; default "localhost".
	Helo string `toml:"helo"`
	// StartTLS requires STARTTLS (RFC 3207) on the relay, verifying its
	// certificate against the relay host name; the EHLO name is then
	// "localhost".
	StartTLS bool `toml:"starttls"`
	// From is the header and envelope sender, e.g.
	// "ratelimitd@mail.example.org"; required when To is set.
	From string `toml:"from"`
	// To are the postmaster addresses; empty disables mail.
	To []string `toml:"to"`
	// Subject and Body are text/template templates executed with the Event
	// (fields and the methods Summary, PeriodText, RateText and MaxText).
	// Defaults:
	// DefaultSubject and DefaultBody.
	Subject string `toml:"subject"`
	Body    string `toml:"body"`
	// NotifySender also mails the envelope sender of a limit_refused event,
	// with SenderSubject and SenderBody (defaults DefaultSenderSubject,
	// DefaultSenderBody). Use it only where senders are authenticated
	// (submission): a forged sender would otherwise get the mail.
	NotifySender  bool   `toml:"notify_sender"`
	SenderSubject string `toml:"sender_subject"`
	SenderBody    string `toml:"sender_body"`
	// Retry: timeout (per SMTP transaction) default 30s.
	Retry
}

// Retry is how each channel retries: the keys timeout, attempts, backoff
// and max_backoff of [notify.webhook] and [notify.mail].
type Retry struct {
	// Timeout bounds one attempt.
	Timeout policy.Duration `toml:"timeout"`
	// Attempts is how often an event is tried (network error, HTTP 408,
	// 429 or 5xx, SMTP 4xx) before it is given up and counted; default 5.
	Attempts int `toml:"attempts"`
	// Backoff is the wait after the first failed attempt, doubled after
	// each further one up to MaxBackoff; defaults 1s and 1m.
	Backoff    policy.Duration `toml:"backoff"`
	MaxBackoff policy.Duration `toml:"max_backoff"`
}

// The default templates.
const (
	DefaultSubject = `[ratelimitd] {{.Summary}}`
	DefaultBody    = `{{.Summary}}

event:  {{.Kind}}
time:   {{.Time.Format "2006-01-02 15:04:05 MST"}}
{{- with .Key}}
key:    {{.}}{{end}}
{{- with .Limit}}
limit:  {{.}}{{end}}
{{- if .Max}}
rate:   {{.RateText}} per {{.PeriodText}} (limit {{.MaxText}}){{end}}
{{- with .Action}}
action: {{.}}{{end}}
{{- with .Sender}}
sender: {{.}}{{end}}
{{- with .Client}}
client: {{.}}{{end}}
{{- with .By}}
by:     {{.}}{{end}}
{{- with .Detail}}

{{.}}{{end}}
{{if eq .Kind "limit_refused"}}
Review:  ratelimitd rate show {{.KeyArg}}
         ratelimitd quarantine list --key {{.KeyArg}}
Forgive: ratelimitd rate reset {{.KeyArg}}
{{end}}`
	DefaultSenderSubject = `Your outgoing mail is being limited`
	DefaultSenderBody    = `Your account ({{.Key}}) sent {{.RateText}} messages per {{.PeriodText}}; the limit is {{.MaxText}}.
Further mail is {{if eq .Action "defer"}}deferred and retried later by your mail program{{else if eq .Action "reject"}}refused{{else}}held for review by the postmaster{{end}}.

If you did not send this mail, your password may be known to someone
else: change it and tell the postmaster.
`
)

// enabled reports whether any channel is configured.
func (c *Config) enabled() bool { return c.Webhook.URL != "" || len(c.Mail.To) > 0 }

// WithDefaults fills the unset fields.
func (c *Config) WithDefaults() {
	if c.QueueSize == 0 {
		c.QueueSize = 1000
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = 100000
	}
	c.Webhook.Retry.withDefaults(10 * time.Second)
	m := &c.Mail
	if m.Relay == "" {
		m.Relay = "127.0.0.1:25"
	}
	if m.Helo == "" {
		m.Helo = "localhost"
	}
	if m.Subject == "" {
		m.Subject = DefaultSubject
	}
	if m.Body == "" {
		m.Body = DefaultBody
	}
	if m.SenderSubject == "" {
		m.SenderSubject = DefaultSenderSubject
	}
	if m.SenderBody == "" {
		m.SenderBody = DefaultSenderBody
	}
	m.Retry.withDefaults(30 * time.Second)
}

func (r *Retry) withDefaults(timeout time.Duration) {
	if r.Timeout == 0 {
		r.Timeout = policy.Duration(timeout)
	}
	if r.Attempts == 0 {
		r.Attempts = 5
	}
	if r.Backoff == 0 {
		r.Backoff = policy.Duration(time.Second)
	}
	if r.MaxBackoff == 0 {
		r.MaxBackoff = policy.Duration(time.Minute)
	}
}

// Validate checks c (after WithDefaults) and returns one error per problem,
// each naming its key ("notify.webhook.url: ...").
func (c *Config) Validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("notify.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	for i, e := range c.Events {
		if !knownKind(Kind(e)) {
			bad(fmt.Sprintf("events[%d]", i), "%q is not one of %s", e, kindList())
		}
	}
	if c.QueueSize < 0 {
		bad("queue_size", "must not be negative")
	}
	if c.MaxKeys < 0 {
		bad("max_keys", "must not be negative")
	}
	if u := c.Webhook.URL; u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("webhook.url", "%q is not an http:// or https:// URL", u)
		}
	}
	if c.Webhook.Attempts < 0 {
		bad("webhook.attempts", "must not be negative")
	}
	m := c.Mail
	if len(m.To) > 0 {
		if m.From == "" {
			bad("mail.from", "is required when notify.mail.to is set (e.g. \"ratelimitd@mail.example.org\")")
		}
		if _, _, err := net.SplitHostPort(m.Relay); err != nil {
			bad("mail.relay", "%q is not host:port", m.Relay)
		}
	}
	if m.Attempts < 0 {
		bad("mail.attempts", "must not be negative")
	}
	for key, t := range map[string]string{"subject": m.Subject, "body": m.Body, "sender_subject": m.SenderSubject, "sender_body": m.SenderBody} {
		if _, err := parseTemplate(key, t); err != nil {
			bad("mail."+key, "%v", err)
		}
	}
	return errs
}

func parseTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(template.FuncMap{"shellquote": ShellQuote}).Parse(text)
	if err != nil {
		return nil, err
	}
	// Execute once on a sample so that a misspelt field is a
	// configuration error, not a failure at the first event.
	if err := t.Execute(discard{}, Event{Kind: LimitRefused, Time: time.Unix(0, 0), Key: "k", Limit: "l", Period: time.Hour, Max: 1}); err != nil {
		return nil, err
	}
	return t, nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func knownKind(k Kind) bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

func kindList() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}
