package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Server is the [server] table (keys documented in reference.go).
type Server struct {
	PolicyListen   []string        `toml:"policy_listen"`
	SocketMode     string          `toml:"socket_mode"` // octal
	SocketGroup    string          `toml:"socket_group"`
	User           string          `toml:"user"`
	Group          string          `toml:"group"`
	AllowNetworks  []string        `toml:"allow_networks"`
	StateDir       string          `toml:"state_dir"`
	AdminSocket    string          `toml:"admin_socket"`
	MetricsListen  *string         `toml:"metrics_listen"`
	FlushInterval  policy.Duration `toml:"flush_interval"`
	MaxKeys        int             `toml:"max_keys"`
	IdleTimeout    policy.Duration `toml:"idle_timeout"`
	RequestTimeout policy.Duration `toml:"request_timeout"`
	MaxConnections int             `toml:"max_connections"`
	LogLevel       string          `toml:"log_level"`
	LogFormat      string          `toml:"log_format"`

	MaxConnectionsPerClient int             `toml:"max_connections_per_client"`
	FirstRequestTimeout     policy.Duration `toml:"first_request_timeout"`
}

// The state directories DefaultStateDir chooses between.
const (
	RootStateDir = "/var/lib/ratelimitd"
	UserStateDir = "./ratelimitd-state"
)

// DefaultStateDir is the default server.state_dir: RootStateDir for root,
// else UserStateDir.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return RootStateDir
	}
	return UserStateDir
}

// DBPath is the BoltDB file holding rate state and the quarantine.
func (s *Server) DBPath() string { return filepath.Join(s.StateDir, "ratelimitd.db") }

// Mode returns SocketMode parsed as octal.
func (s *Server) Mode() uint32 {
	m, _ := strconv.ParseUint(s.SocketMode, 8, 32)
	return uint32(m)
}

// Networks returns AllowNetworks parsed (bare addresses become /32, /128).
func (s *Server) Networks() []netip.Prefix { return parsePrefixes(s.AllowNetworks) }

// parsePrefixes parses ns, leaving out what policy.ParsePrefix refuses.
func parsePrefixes(ns []string) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range ns {
		if p, err := policy.ParsePrefix(n); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func (s *Server) validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("server.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	for i, l := range s.PolicyListen {
		key := fmt.Sprintf("policy_listen[%d]", i)
		path, unix := strings.CutPrefix(l, "unix:")
		ap, err := netip.ParseAddrPort(l)
		switch {
		case unix && !filepath.IsAbs(path) && !strings.HasPrefix(path, "."):
			bad(key, "unix socket path %q must be absolute or start with ./", path)
		case unix:
		case err != nil:
			bad(key, "%q is neither host:port (numeric) nor unix:/path", l)
		case !ap.Addr().IsLoopback() && len(s.AllowNetworks) == 0:
			bad(key, "%q is not loopback: set server.allow_networks to the MTA hosts allowed to connect", l)
		}
	}
	if m, err := strconv.ParseUint(s.SocketMode, 8, 32); err != nil || m > 0o777 {
		bad("socket_mode", "%q is not an octal permission like 0660", s.SocketMode)
	} else if m&0o002 != 0 {
		bad("socket_mode", "%q lets every local user talk to the policy socket", s.SocketMode)
	}
	for i, n := range s.AllowNetworks {
		if _, err := policy.ParsePrefix(n); err != nil {
			bad(fmt.Sprintf("allow_networks[%d]", i), "%q is not an address or prefix", n)
		}
	}
	if *s.MetricsListen != "" {
		if _, err := netip.ParseAddrPort(*s.MetricsListen); err != nil {
			bad("metrics_listen", "%q is not a numeric host:port", *s.MetricsListen)
		}
	}
	if time.Duration(s.FlushInterval) > time.Minute { // negative: negativeDurations
		bad("flush_interval", "must be at most 1m, got %s", human.Duration(time.Duration(s.FlushInterval)))
	}
	if s.MaxKeys < 0 {
		bad("max_keys", "must not be negative")
	}
	if s.MaxConnections < 0 {
		bad("max_connections", "must not be negative (0 means min(1024, RLIMIT_NOFILE/2))")
	}
	if s.MaxConnectionsPerClient < 0 {
		bad("max_connections_per_client", "must not be negative (0 means min(256, max_connections))")
	}
	if !slices.Contains([]string{"debug", "info", "warn", "error"}, s.LogLevel) {
		bad("log_level", "%q is not debug, info, warn or error", s.LogLevel)
	}
	if s.LogFormat != "text" && s.LogFormat != "json" {
		bad("log_format", "%q is not text or json", s.LogFormat)
	}
	if s.Group != "" && s.User == "" {
		bad("group", "%q is set without server.user: set the user to drop privileges to", s.Group)
	}
	if s.User == "root" || s.User == "0" {
		bad("user", "%q: name the unprivileged user the daemon runs as (e.g. \"ratelimitd\"), or leave it out", s.User)
	}
	return errs
}
