package notify

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Config is the [notify] table; on when webhook.url or mail.to is set.
type Config struct {
	// Events lists the kinds sent (Kinds); empty means all.
	Events []string `toml:"events"`
	// QueueSize bounds the events waiting (default 1000); more are dropped.
	QueueSize int `toml:"queue_size"`
	// MaxKeys bounds the (limit, key) pairs remembered for limit_refused
	// (default 100000); when full, first refusals are dropped.
	MaxKeys int     `toml:"max_keys"`
	Webhook Webhook `toml:"webhook"`
	Mail    Mail    `toml:"mail"`
}

// Webhook is [notify.webhook]: each event is POSTed as one JSON object.
type Webhook struct {
	// URL is the http or https endpoint; "" disables the webhook.
	URL string `toml:"url"`
	// Secret, when set, signs each body (SignatureHeader).
	Secret string `toml:"secret"`
	Retry         // timeout per attempt: default 10s
}

// Mail is [notify.mail]: mail through an SMTP relay.
type Mail struct {
	// Relay is the SMTP relay host:port (default "127.0.0.1:25"), Helo
	// the EHLO name (default "localhost").
	Relay string `toml:"relay"`
	Helo  string `toml:"helo"`
	// StartTLS requires STARTTLS (RFC 3207) with a verified certificate.
	StartTLS bool `toml:"starttls"`
	// From is the header and envelope sender; required when To is set.
	From string `toml:"from"`
	// To are the postmaster addresses; empty disables mail.
	To []string `toml:"to"`
	// Subject and Body are text/template templates of the Event.
	Subject string `toml:"subject"`
	Body    string `toml:"body"`
	// NotifySender also mails a limit_refused event's sender (SenderSubject,
	// SenderBody); only where senders are authenticated.
	NotifySender  bool   `toml:"notify_sender"`
	SenderSubject string `toml:"sender_subject"`
	SenderBody    string `toml:"sender_body"`
	Retry                // timeout per SMTP transaction: default 30s
}

// Retry is how a channel retries a temporary failure (network, HTTP 408,
// 429, 5xx, SMTP 4xx): Attempts (5) tries, Backoff (1s) doubled up to
// MaxBackoff (1m); Timeout bounds one attempt.
type Retry struct {
	Timeout    policy.Duration `toml:"timeout"`
	Attempts   int             `toml:"attempts"`
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

func (c *Config) enabled() bool { return c.Webhook.URL != "" || len(c.Mail.To) > 0 }

// WithDefaults fills the unset fields.
func (c *Config) WithDefaults() {
	orDefault(&c.QueueSize, 1000)
	orDefault(&c.MaxKeys, 100000)
	c.Webhook.Retry.withDefaults(10 * time.Second)
	m := &c.Mail
	orDefault(&m.Relay, "127.0.0.1:25")
	orDefault(&m.Helo, "localhost")
	orDefault(&m.Subject, DefaultSubject)
	orDefault(&m.Body, DefaultBody)
	orDefault(&m.SenderSubject, DefaultSenderSubject)
	orDefault(&m.SenderBody, DefaultSenderBody)
	m.Retry.withDefaults(30 * time.Second)
}

func (r *Retry) withDefaults(timeout time.Duration) {
	orDefault(&r.Timeout, policy.Duration(timeout))
	orDefault(&r.Attempts, 5)
	orDefault(&r.Backoff, policy.Duration(time.Second))
	orDefault(&r.MaxBackoff, policy.Duration(time.Minute))
}

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate checks c after WithDefaults, one error per key at fault.
func (c *Config) Validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("notify.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	for i, e := range c.Events {
		if !slices.Contains(Kinds, e) {
			bad(fmt.Sprintf("events[%d]", i), "%q is not one of %s", e, strings.Join(Kinds, ", "))
		}
	}
	m := c.Mail
	for _, n := range []struct {
		key string
		v   int
	}{{"queue_size", c.QueueSize}, {"max_keys", c.MaxKeys}, {"webhook.attempts", c.Webhook.Attempts}, {"mail.attempts", m.Attempts}} {
		if n.v < 0 {
			bad(n.key, "must not be negative")
		}
	}
	if u := c.Webhook.URL; u != "" {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("webhook.url", "%q is not an http:// or https:// URL", u)
		}
	}
	if len(m.To) > 0 {
		if m.From == "" {
			bad("mail.from", "is required when notify.mail.to is set (e.g. \"ratelimitd@mail.example.org\")")
		}
		if _, _, err := net.SplitHostPort(m.Relay); err != nil {
			bad("mail.relay", "%q is not host:port", m.Relay)
		}
	}
	_, terrs := m.templates()
	return append(errs, terrs...)
}

// templates parses the mail templates, by key; each must run on a sample
// Event. The errors name the key.
func (m *Mail) templates() (map[string]*template.Template, []error) {
	ts := map[string]*template.Template{}
	var errs []error
	for _, kt := range [][2]string{{"subject", m.Subject}, {"body", m.Body}, {"sender_subject", m.SenderSubject}, {"sender_body", m.SenderBody}} {
		key, text := kt[0], kt[1]
		t, err := template.New(key).Option("missingkey=error").Funcs(template.FuncMap{"shellquote": ShellQuote}).Parse(text)
		if err == nil {
			err = t.Execute(io.Discard, Event{Kind: LimitRefused, Time: time.Unix(0, 0), Key: "k", Limit: "l", Period: time.Hour, Max: 1})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("notify.mail.%s: %v", key, err))
		}
		ts[key] = t
	}
	return ts, errs
}
