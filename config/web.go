package config

import (
	"fmt"
	"net/netip"
	"path/filepath"
)

// Web is the [web] table: the browser console (package web). It is off
// unless Listen is set.
type Web struct {
	// Listen is the console's numeric "host:port", e.g.
	// "127.0.0.1:9732"; "" (default) disables the console. An address
	// that is not loopback needs TLSCert and TLSKey, or a reverse proxy
	// with TLS in front on the same host (docs/console.md).
	Listen string `toml:"listen"`
	// TLSCert and TLSKey are PEM files; both set, the console serves
	// HTTPS and its session cookie is Secure. SIGHUP rereads them.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// UsersFile holds the console's users, their roles and argon2id
	// password hashes, managed by `ratelimitd web user add|remove`;
	// default STATE_DIR/web-users. SIGHUP rereads it.
	UsersFile string `toml:"users_file"`
}

// DefaultWebPort is the port docs and examples give [web] listen.
const DefaultWebPort = 9732

// withDefaults fills unset fields; stateDir is server.state_dir with its
// default filled in.
func (w *Web) withDefaults(stateDir string) {
	if w.UsersFile == "" {
		w.UsersFile = filepath.Join(stateDir, "web-users")
	}
}

func (w *Web) validate() []error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("web.%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if w.Listen != "" {
		ap, err := netip.ParseAddrPort(w.Listen)
		switch {
		case err != nil:
			bad("listen", "%q is not a numeric host:port", w.Listen)
		case !ap.Addr().IsLoopback() && (w.TLSCert == "" || w.TLSKey == ""):
			bad("listen", "%q is not loopback: set tls_cert and tls_key, or listen on loopback behind a TLS proxy (docs/console.md)", w.Listen)
		}
	}
	if (w.TLSCert == "") != (w.TLSKey == "") {
		bad("tls_cert", "tls_cert and tls_key go together: set both or neither")
	}
	return errs
}

// TLS reports whether the console serves HTTPS.
func (w *Web) TLS() bool { return w.TLSCert != "" && w.TLSKey != "" }
