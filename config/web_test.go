package config_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/config"
)

// TestWebTable: the console is off by default, its users file defaults to
// the state directory, and a listener off loopback needs TLS.
func TestWebTable(t *testing.T) {
	const limit = "[[limit]]\nname = \"x\"\nkey = \"sender\"\nlimit = 1\nperiod = \"1h\"\n"
	f, err := config.Parse([]byte("[server]\nstate_dir = \"/srv/rl\"\n"+limit), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Web.Listen != "" || f.Web.TLSCert != "" {
		t.Errorf("web on by default: %+v", f.Web)
	}
	if len(f.Web.Proxies()) != 0 {
		t.Errorf("proxies trusted by default: %v", f.Web.Proxies())
	}
	if want := filepath.Join("/srv/rl", "web-users"); f.Web.UsersFile != want {
		t.Errorf("users_file = %q, want %q", f.Web.UsersFile, want)
	}
	for _, tc := range []struct{ text, want string }{
		{"[web]\nlisten = \"127.0.0.1:9732\"\n", ""},
		{"[web]\nlisten = \"localhost:9732\"\n", "web.listen"},
		{"[web]\nlisten = \"192.0.2.1:9732\"\n", "not loopback"},
		{"[web]\nlisten = \"192.0.2.1:9732\"\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n", ""},
		{"[web]\nlisten = \"127.0.0.1:9732\"\ntls_cert = \"c.pem\"\n", "go together"},
		{"[web]\ntrusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\"]\n", ""},
		{"[web]\ntrusted_proxies = [\"proxy.example\"]\n", "web.trusted_proxies"},
	} {
		_, err := config.Parse([]byte(tc.text+limit), "t.toml")
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one containing %q", tc.text, err, tc.want)
		}
	}
}
