package config

import (
	"fmt"
	"net/netip"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Web is the [web] table: the browser console (package web), off while
// Listen is "".
type Web struct {
	Listen    string `toml:"listen"`
	TLSCert   string `toml:"tls_cert"`
	TLSKey    string `toml:"tls_key"`
	UsersFile string `toml:"users_file"`
	// TrustedProxies are addresses or prefixes whose X-Forwarded-For the
	// console believes.
	TrustedProxies []string `toml:"trusted_proxies"`
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
	for _, p := range w.TrustedProxies {
		if _, err := policy.ParsePrefix(p); err != nil {
			bad("trusted_proxies", "%q is not an address or prefix", p)
		}
	}
	if (w.TLSCert == "") != (w.TLSKey == "") {
		bad("tls_cert", "tls_cert and tls_key go together: set both or neither")
	}
	return errs
}

// Proxies returns TrustedProxies parsed (bare addresses become /32, /128).
func (w *Web) Proxies() []netip.Prefix { return parsePrefixes(w.TrustedProxies) }
