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
	// MTA's hold queue; "{queue_id}" is replaced by the queue ID, which is
	// always a valid Postfix or Exim queue ID, and commands run without a
	// shell. ReleaseCommand may be one command or a list of commands run
	// in order (the first decides success). Defaults: postsuper -H then
	// postqueue -i (schedule delivery now rather than within
	// queue_run_delay), postsuper -d and postcat -q; for Exim use
	// ["exim", "-Mt", "{queue_id}"] and ["exim", "-Mrm", "{queue_id}"].
	ReleaseCommand Commands `toml:"release_command"`
	DeleteCommand  []string `toml:"delete_command"`
	ShowCommand    []string `toml:"show_command"`
	// QueueListCommand lists the MTA's queue (JSON lines, or Exim's
	// exim -bp listing): every held message's queue ID is confirmed in it
	// before a command runs on it, and the queue ID of a message held at
	// its first RCPT (Postfix asks before it has one) is found in it.
	// Default postqueue -j (Postfix 3.1 and later); Exim: exim -bp. []
	// disables it, and then held mail is never acted on.
	QueueListCommand *[]string `toml:"queue_list_command"`
	// ExpireAction is what happens to held and frozen mail older than
	// MaxAge: "bounce" (default: frozen mail gets a DSN to its envelope
	// sender, held mail is returned by the MTA with ExpireCommand; mail
	// from the null sender is deleted without a DSN) or "keep" (kept and
	// flagged until an operator acts).
	ExpireAction string `toml:"expire_action"`
	// ExpireCommand returns held mail past MaxAge to its sender; one
	// command or a list. Default postsuper -f then postqueue -i.
	ExpireCommand Commands `toml:"expire_command"`
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
		q.ReleaseCommand = Commands{{"postsuper", "-H", "{queue_id}"}, {"postqueue", "-i", "{queue_id}"}}
	}
	if len(q.ExpireCommand) == 0 {
		q.ExpireCommand = Commands{{"postsuper", "-f", "{queue_id}"}, {"postqueue", "-i", "{queue_id}"}}
	}
	if q.ExpireAction == "" {
		q.ExpireAction = "bounce"
	}
	if len(q.DeleteCommand) == 0 {
		q.DeleteCommand = []string{"postsuper", "-d", "{queue_id}"}
	}
	if q.QueueListCommand == nil {
		q.QueueListCommand = &[]string{"postqueue", "-j"}
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
	for name, cs := range map[string]Commands{"release_command": q.ReleaseCommand, "delete_command": {q.DeleteCommand},
		"show_command": {q.ShowCommand}, "expire_command": q.ExpireCommand} {
		for _, c := range cs {
			if len(c) == 0 || !strings.Contains(strings.Join(c, " "), "{queue_id}") {
				errs = append(errs, fmt.Errorf("quarantine.%s: %q does not contain {queue_id}", name, c))
			}
		}
	}
	if q.ExpireAction != "bounce" && q.ExpireAction != "keep" {
		errs = append(errs, fmt.Errorf("quarantine.expire_action: %q is neither \"bounce\" nor \"keep\"", q.ExpireAction))
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

// Commands is one command (["postsuper", "-H", "{queue_id}"]) or a list
// of commands run in order ([["postsuper", "-H", "{queue_id}"],
// ["postqueue", "-i", "{queue_id}"]]); either TOML form decodes to a list.
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

// validateAutoRelease checks each [[limit]]'s auto_release.
func validateAutoRelease(limits []policy.LimitConfig) []error {
	var errs []error
	for i, l := range limits {
		switch l.AutoRelease {
		case "", "none":
		case "drip":
			if l.Action != "hold" && l.Action != "freeze" {
				errs = append(errs, fmt.Errorf("limit[%d] (%s).auto_release: \"drip\" needs action \"hold\" or \"freeze\"", i, l.Name))
			}
		default:
			errs = append(errs, fmt.Errorf("limit[%d] (%s).auto_release: %q is neither \"drip\" nor \"none\"", i, l.Name, l.AutoRelease))
		}
	}
	return errs
}
