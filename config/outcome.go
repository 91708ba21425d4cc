package config

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"
	"github.com/ratelimitd/ratelimitd/policy"
)

// Outcome is the [outcome] table: the feeds of what happened to a
// sender's mail, which outcome limits (per = "bounce", "unknown_rcpt",
// "deferral") count (package outcome, docs/limits.md).
type Outcome struct {
	Maillog       string          `toml:"maillog"`
	NoticesListen string          `toml:"notices_listen"`
	EximListen    string          `toml:"exim_listen"`
	Lifetime      policy.Duration `toml:"lifetime"`
	MaxMessages   int             `toml:"max_messages"`
	Poll          policy.Duration `toml:"poll"`
}

func (o *Outcome) validate() []error {
	var errs []error
	if o.Maillog != "" && !filepath.IsAbs(o.Maillog) {
		errs = append(errs, fmt.Errorf("outcome.maillog: %q is not an absolute path (e.g. /var/log/mail.log)", o.Maillog))
	}
	for _, l := range [][2]string{{"notices_listen", o.NoticesListen}, {"exim_listen", o.EximListen}} {
		key, addr := l[0], l[1]
		if addr == "" {
			continue
		}
		host, _, err := net.SplitHostPort(addr)
		a, aerr := netip.ParseAddr(host)
		if err != nil || aerr != nil || !a.IsLoopback() {
			errs = append(errs, fmt.Errorf("outcome.%s: %q is not a loopback host:port (e.g. 127.0.0.1:10027)", key, addr))
		}
	}
	if o.Lifetime < policy.Duration(time.Hour) {
		errs = append(errs, fmt.Errorf("outcome.lifetime: %s is too short: at least 1h (Postfix keeps mail 5d)", human.Duration(time.Duration(o.Lifetime))))
	}
	if o.MaxMessages < 1 {
		errs = append(errs, fmt.Errorf("outcome.max_messages: %d: at least 1", o.MaxMessages))
	}
	if o.Poll < policy.Duration(10*time.Millisecond) || o.Poll > policy.Duration(time.Minute) {
		errs = append(errs, fmt.Errorf("outcome.poll: %s is outside 10ms to 1m", human.Duration(time.Duration(o.Poll))))
	}
	return errs
}

// Feeds reports whether an outcome feed is configured.
func (o *Outcome) Feeds() bool { return o.Maillog != "" || o.NoticesListen != "" || o.EximListen != "" }
