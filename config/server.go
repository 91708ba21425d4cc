package config

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Server is the [server] table: where the daemon listens and keeps state.
type Server struct {
	// PolicyListen are the policy-delegation listeners: "host:port" for
	// TCP (loopback by default) or "unix:/path" for a unix socket, e.g.
	// "unix:/var/spool/postfix/private/ratelimitd". Default
	// ["127.0.0.1:10031"].
	PolicyListen []string `toml:"policy_listen"`
	// SocketMode is the permission of unix policy and milter sockets, octal text;
	// default "0660".
	SocketMode string `toml:"socket_mode"`
	// SocketGroup is the group of unix policy and milter sockets (e.g. "postfix");
	// empty keeps the daemon's group.
	SocketGroup string `toml:"socket_group"`
	// AllowNetworks are the client networks TCP listeners accept; a
	// connection from elsewhere is closed before anything is read. Empty
	// means loopback only.
	AllowNetworks []string `toml:"allow_networks"`
	// StateDir holds the BoltDB file (rate state and quarantine) and, by
	// default, the admin socket. Default DefaultStateDir(): the
	// Filesystem Hierarchy Standard's /var/lib/ratelimitd when run as
	// root, "./ratelimitd-state" otherwise.
	StateDir string `toml:"state_dir"`
	// AdminSocket is the admin unix socket the CLI talks to; default
	// STATE_DIR/admin.sock. Its directory must not be world-writable.
	AdminSocket string `toml:"admin_socket"`
	// MetricsListen is the Prometheus /metrics address; default
	// "127.0.0.1:9731"; "" disables it.
	MetricsListen *string `toml:"metrics_listen"`
	// FlushInterval is how often rate state is written to BoltDB (a crash
	// loses at most this much); default 1s.
	FlushInterval policy.Duration `toml:"flush_interval"`
	// MaxKeys bounds the (limit, key) pairs kept in memory and on disk;
	// the least recently seen are evicted first. Default 4,000,000.
	MaxKeys int `toml:"max_keys"`
	// IdleTimeout closes a policy connection idle that long; default 330s
	// (above Postfix's smtpd_policy_service_max_idle of 300s).
	IdleTimeout policy.Duration `toml:"idle_timeout"`
	// RequestTimeout bounds reading and answering one request, from its
	// first byte; default 10s.
	RequestTimeout policy.Duration `toml:"request_timeout"`
	// MaxConnections caps the policy and milter connections open at once
	// (all their listeners together); a connection over the cap is closed
	// at once, counted and logged, so the admin socket and metrics keep
	// answering when the process nears its file-descriptor limit. 0
	// (default) means min(1024, RLIMIT_NOFILE/2).
	MaxConnections int `toml:"max_connections"`
	// LogLevel is debug, info (default), warn or error; LogFormat is text
	// (default) or json.
	LogLevel  string `toml:"log_level"`
	LogFormat string `toml:"log_format"`
}

// Defaults for Server.
const (
	DefaultPolicyListen = "127.0.0.1:10031"
	// RootStateDir and UserStateDir are DefaultStateDir's answers.
	RootStateDir         = "/var/lib/ratelimitd"
	UserStateDir         = "./ratelimitd-state"
	DefaultMetricsListen = "127.0.0.1:9731"
	DefaultFlushInterval = time.Second
	DefaultIdleTimeout   = 330 * time.Second
	DefaultRequestTimout = 10 * time.Second
)

// DefaultStateDir is server.state_dir when the configuration leaves it
// out: RootStateDir for root (the daemon as installed, and the CLI run by
// the postmaster, meet at RootStateDir/admin.sock), UserStateDir for
// anyone else.
func DefaultStateDir() string {
	if os.Geteuid() == 0 {
		return RootStateDir
	}
	return UserStateDir
}

// withDefaults fills unset fields.
func (s *Server) withDefaults() {
	if len(s.PolicyListen) == 0 {
		s.PolicyListen = []string{DefaultPolicyListen}
	}
	if s.SocketMode == "" {
		s.SocketMode = "0660"
	}
	if s.StateDir == "" {
		s.StateDir = DefaultStateDir()
	}
	if s.AdminSocket == "" {
		s.AdminSocket = filepath.Join(s.StateDir, "admin.sock")
	}
	if s.MetricsListen == nil {
		m := DefaultMetricsListen
		s.MetricsListen = &m
	}
	if s.FlushInterval == 0 {
		s.FlushInterval = policy.Duration(DefaultFlushInterval)
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = policy.Duration(DefaultIdleTimeout)
	}
	if s.RequestTimeout == 0 {
		s.RequestTimeout = policy.Duration(DefaultRequestTimout)
	}
	if s.LogLevel == "" {
		s.LogLevel = "info"
	}
	if s.LogFormat == "" {
		s.LogFormat = "text"
	}
}

// DBPath is the BoltDB file holding rate state and the quarantine.
func (s *Server) DBPath() string { return filepath.Join(s.StateDir, "ratelimitd.db") }

// Mode returns SocketMode parsed as octal.
func (s *Server) Mode() uint32 {
	m, _ := strconv.ParseUint(s.SocketMode, 8, 32)
	return uint32(m)
}

// Networks returns AllowNetworks parsed (bare addresses become /32, /128).
func (s *Server) Networks() []netip.Prefix {
	var out []netip.Prefix
	for _, n := range s.AllowNetworks {
		if p, err := parsePrefix(n); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func parsePrefix(n string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(n); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(n)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (s *Server) validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("server.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	for i, l := range s.PolicyListen {
		if path, ok := strings.CutPrefix(l, "unix:"); ok {
			if !filepath.IsAbs(path) && !strings.HasPrefix(path, ".") {
				bad(fmt.Sprintf("policy_listen[%d]", i), "unix socket path %q must be absolute or start with ./", path)
			}
			continue
		}
		ap, err := netip.ParseAddrPort(l)
		if err != nil {
			bad(fmt.Sprintf("policy_listen[%d]", i), "%q is neither host:port (numeric) nor unix:/path", l)
			continue
		}
		if !ap.Addr().IsLoopback() && len(s.AllowNetworks) == 0 {
			bad(fmt.Sprintf("policy_listen[%d]", i), "%q is not loopback: set server.allow_networks to the MTA hosts allowed to connect", l)
		}
	}
	if m, err := strconv.ParseUint(s.SocketMode, 8, 32); err != nil || m > 0o777 {
		bad("socket_mode", "%q is not an octal permission like 0660", s.SocketMode)
	} else if m&0o002 != 0 {
		bad("socket_mode", "%q lets every local user talk to the policy socket", s.SocketMode)
	}
	for i, n := range s.AllowNetworks {
		if _, err := parsePrefix(n); err != nil {
			bad(fmt.Sprintf("allow_networks[%d]", i), "%q is not an address or prefix", n)
		}
	}
	if *s.MetricsListen != "" {
		if _, err := netip.ParseAddrPort(*s.MetricsListen); err != nil {
			bad("metrics_listen", "%q is not a numeric host:port", *s.MetricsListen)
		}
	}
	if s.FlushInterval < 0 || time.Duration(s.FlushInterval) > time.Minute {
		bad("flush_interval", "must be between 0 and 1m, got %s", human.Duration(time.Duration(s.FlushInterval)))
	}
	if s.MaxKeys < 0 {
		bad("max_keys", "must not be negative")
	}
	if s.MaxConnections < 0 {
		bad("max_connections", "must not be negative (0 means min(1024, RLIMIT_NOFILE/2))")
	}
	switch s.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "%q is not debug, info, warn or error", s.LogLevel)
	}
	switch s.LogFormat {
	case "text", "json":
	default:
		bad("log_format", "%q is not text or json", s.LogFormat)
	}
	return errs
}
