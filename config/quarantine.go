package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Quarantine is the [quarantine] table: where held and frozen mail is
// recorded and how it is released.
type Quarantine struct {
	// MaxSize bounds the bytes of frozen messages stored; a freeze that
	// would pass it is temp-failed (never lost). Default "2G".
	MaxSize policy.Size `toml:"max_size"`
	// MaxAge: entries older than this are deleted (held mail is deleted
	// from the MTA too). Default "14d"; "0s" keeps entries forever.
	MaxAge *policy.Duration `toml:"max_age"`
	// ReinjectAddr is the SMTP listener thawed frozen mail is sent to: an
	// MTA port without milters or policy checks. Default "127.0.0.1:10026".
	ReinjectAddr string `toml:"reinject_addr"`
	// ReinjectHelo is the EHLO name used for re-injection.
	ReinjectHelo string `toml:"reinject_helo"`
	// ReleaseCommand, DeleteCommand and ShowCommand act on mail in the
	// MTA's hold queue; "{queue_id}" is replaced by the queue ID. Defaults
	// postsuper -H, postsuper -d and postcat -q; for Exim use
	// ["exim", "-Mt", "{queue_id}"] and ["exim", "-Mrm", "{queue_id}"].
	ReleaseCommand []string `toml:"release_command"`
	DeleteCommand  []string `toml:"delete_command"`
	ShowCommand    []string `toml:"show_command"`
	// AlertEvery logs "KEY has N quarantined messages" each time a key's
	// count of held/frozen messages reaches a multiple of it; default 10.
	AlertEvery int `toml:"alert_every"`
}

// Milter is the [milter] table.
type Milter struct {
	// Listen is "host:port" (loopback unless server.allow_networks) or
	// "unix:/path"; "" (default) disables the milter front end.
	Listen string `toml:"listen"`
	// ReadTimeout closes a milter connection silent for that long;
	// default 330s.
	ReadTimeout policy.Duration `toml:"read_timeout"`
	// MaxMessageSize is the largest message the milter keeps to freeze
	// (kept only when a freeze limit could apply: the first 256 KiB in
	// memory, the rest in an unlinked temporary file in server.state_dir);
	// a bigger one that must be frozen is temp-failed. Default "64M".
	MaxMessageSize policy.Size `toml:"max_message_size"`
}

func (q *Quarantine) withDefaults() {
	if q.MaxSize == 0 {
		q.MaxSize = 2 << 30
	}
	if q.MaxAge == nil {
		d := policy.Duration(14 * 24 * time.Hour)
		q.MaxAge = &d
	}
	if q.ReinjectAddr == "" {
		q.ReinjectAddr = "127.0.0.1:10026"
	}
	if q.ReinjectHelo == "" {
		q.ReinjectHelo = "ratelimitd.localhost"
	}
	if len(q.ReleaseCommand) == 0 {
		q.ReleaseCommand = []string{"postsuper", "-H", "{queue_id}"}
	}
	if len(q.DeleteCommand) == 0 {
		q.DeleteCommand = []string{"postsuper", "-d", "{queue_id}"}
	}
	if len(q.ShowCommand) == 0 {
		q.ShowCommand = []string{"postcat", "-q", "{queue_id}"}
	}
	if q.AlertEvery == 0 {
		q.AlertEvery = 10
	}
}

func (q *Quarantine) validate() []error {
	var errs []error
	if q.MaxSize < 0 {
		errs = append(errs, fmt.Errorf("quarantine.max_size: must not be negative"))
	}
	if *q.MaxAge < 0 {
		errs = append(errs, fmt.Errorf("quarantine.max_age: must not be negative"))
	}
	if _, err := netip.ParseAddrPort(q.ReinjectAddr); err != nil {
		errs = append(errs, fmt.Errorf("quarantine.reinject_addr: %q is not a numeric host:port", q.ReinjectAddr))
	}
	for name, c := range map[string][]string{"release_command": q.ReleaseCommand, "delete_command": q.DeleteCommand, "show_command": q.ShowCommand} {
		if !strings.Contains(strings.Join(c, " "), "{queue_id}") {
			errs = append(errs, fmt.Errorf("quarantine.%s: %q does not contain {queue_id}", name, c))
		}
	}
	if q.AlertEvery < 0 {
		errs = append(errs, fmt.Errorf("quarantine.alert_every: must not be negative"))
	}
	return errs
}

func (m *Milter) withDefaults() {
	if m.ReadTimeout == 0 {
		m.ReadTimeout = policy.Duration(330 * time.Second)
	}
	if m.MaxMessageSize == 0 {
		m.MaxMessageSize = 64 << 20
	}
}

func (m *Milter) validate(allowNetworks []string) []error {
	if m.Listen == "" || strings.HasPrefix(m.Listen, "unix:") {
		return nil
	}
	ap, err := netip.ParseAddrPort(m.Listen)
	if err != nil {
		return []error{fmt.Errorf("milter.listen: %q is neither host:port (numeric) nor unix:/path", m.Listen)}
	}
	if !ap.Addr().IsLoopback() && len(allowNetworks) == 0 {
		return []error{fmt.Errorf("milter.listen: %q is not loopback: set server.allow_networks", m.Listen)}
	}
	return nil
}
