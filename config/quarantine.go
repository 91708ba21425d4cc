package config

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Quarantine is the [quarantine] table: held and frozen mail. In a command
// "{queue_id}" stands for a validated Postfix or Exim queue ID; commands
// run without a shell.
type Quarantine struct {
	MaxSize          policy.Size      `toml:"max_size"`
	MaxAge           *policy.Duration `toml:"max_age"`
	KeepThawed       *policy.Duration `toml:"keep_thawed"`
	ReinjectAddr     string           `toml:"reinject_addr"`
	ReinjectHelo     string           `toml:"reinject_helo"`
	ReleaseCommand   Commands         `toml:"release_command"`
	DeleteCommand    []string         `toml:"delete_command"`
	ShowCommand      []string         `toml:"show_command"`
	QueueListCommand *[]string        `toml:"queue_list_command"` // [] disables it
	ExpireAction     string           `toml:"expire_action"`
	ExpireCommand    Commands         `toml:"expire_command"`
	AlertEvery       int              `toml:"alert_every"`
}

// Milter is the [milter] table; Listen "" disables the milter.
type Milter struct {
	Listen         string          `toml:"listen"`
	ReadTimeout    policy.Duration `toml:"read_timeout"`
	MaxMessageSize policy.Size     `toml:"max_message_size"`

	FirstRequestTimeout     policy.Duration `toml:"first_request_timeout"`
	MaxConnections          int             `toml:"max_connections"`
	MaxConnectionsPerClient int             `toml:"max_connections_per_client"`
}

func (q *Quarantine) validate() []error {
	var errs []error
	for _, c := range []struct {
		key      string
		negative bool
	}{{"max_size", q.MaxSize < 0}, {"max_age", *q.MaxAge < 0}, {"keep_thawed", *q.KeepThawed < 0}, {"alert_every", q.AlertEvery < 0}} {
		if c.negative {
			errs = append(errs, fmt.Errorf("quarantine.%s: must not be negative", c.key))
		}
	}
	if _, err := netip.ParseAddrPort(q.ReinjectAddr); err != nil {
		errs = append(errs, fmt.Errorf("quarantine.reinject_addr: %q is not a numeric host:port", q.ReinjectAddr))
	}
	for _, k := range []struct {
		name string
		cs   Commands
	}{{"release_command", q.ReleaseCommand}, {"delete_command", Commands{q.DeleteCommand}},
		{"show_command", Commands{q.ShowCommand}}, {"expire_command", q.ExpireCommand}} {
		for _, c := range k.cs {
			if len(c) == 0 || !strings.Contains(strings.Join(c, " "), "{queue_id}") {
				errs = append(errs, fmt.Errorf("quarantine.%s: %q does not contain {queue_id}", k.name, c))
			}
		}
	}
	if q.ExpireAction != "bounce" && q.ExpireAction != "keep" {
		errs = append(errs, fmt.Errorf("quarantine.expire_action: %q is neither \"bounce\" nor \"keep\"", q.ExpireAction))
	}
	return errs
}

func (m *Milter) validate(allowNetworks []string) []error {
	var errs []error
	if m.MaxConnections < 0 {
		errs = append(errs, fmt.Errorf("milter.max_connections: must not be negative (0 means min(1024, RLIMIT_NOFILE/4))"))
	}
	if m.MaxConnectionsPerClient < 0 {
		errs = append(errs, fmt.Errorf("milter.max_connections_per_client: must not be negative (0 means min(256, max_connections))"))
	}
	ap, err := netip.ParseAddrPort(m.Listen)
	switch {
	case errs != nil || m.Listen == "" || strings.HasPrefix(m.Listen, "unix:"):
	case err != nil:
		errs = append(errs, fmt.Errorf("milter.listen: %q is neither host:port (numeric) nor unix:/path", m.Listen))
	case !ap.Addr().IsLoopback() && len(allowNetworks) == 0:
		errs = append(errs, fmt.Errorf("milter.listen: %q is not loopback: set server.allow_networks", m.Listen))
	}
	return errs
}

// Commands is one command (["postsuper", "-H", "{queue_id}"]) or a list of
// commands run in order; either TOML form decodes to a list.
type Commands [][]string

// UnmarshalTOML implements toml.Unmarshaler for both forms.
func (c *Commands) UnmarshalTOML(v any) error {
	list, ok := v.([]any)
	if !ok {
		return fmt.Errorf("a command must be an array of strings or an array of such arrays")
	}
	var one []string
	var many Commands
	for _, x := range list {
		switch x := x.(type) {
		case string:
			one = append(one, x)
		case []any:
			var cmd []string
			for _, a := range x {
				s, ok := a.(string)
				if !ok {
					return fmt.Errorf("a command's arguments must be strings")
				}
				cmd = append(cmd, s)
			}
			many = append(many, cmd)
		default:
			return fmt.Errorf("a command must be an array of strings or an array of such arrays")
		}
	}
	if len(one) > 0 && len(many) > 0 {
		return fmt.Errorf("mixes strings and arrays")
	}
	if len(one) > 0 {
		many = Commands{one}
	}
	*c = many
	return nil
}
