package configs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// shippedTexts are the files a postmaster copies addresses from: the
// shipped configuration files, the guides, the README, the commands' help
// and the Debian packaging.
func shippedTexts(t *testing.T) map[string]string {
	t.Helper()
	var paths []string
	for _, glob := range []string{"*.toml", "*.cf", "*.conf", "*.service", "../README.md", "../docs/*.md",
		"../cmd/ratelimitd/help/*.txt", "../packaging/*.socket", "../packaging/*.service", "../packaging/*.sh"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, m...)
	}
	texts := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		texts[p] = string(b)
	}
	if len(texts) < 15 {
		t.Fatalf("only %d files found: %v", len(texts), paths)
	}
	return texts
}

// postfixForm is how main.cf names a listener ratelimitd.toml gives:
// "127.0.0.1:10031" is inet:127.0.0.1:10031, and a unix socket under
// Postfix's queue directory is named relative to it (smtpd may run
// chrooted there): unix:/var/spool/postfix/private/x is unix:private/x.
func postfixForm(listen string) string {
	if path, ok := strings.CutPrefix(listen, "unix:"); ok {
		return "unix:" + strings.TrimPrefix(path, "/var/spool/postfix/")
	}
	return "inet:" + listen
}

var (
	tomlPolicy   = regexp.MustCompile(`(?m)^#?policy_listen = \["([^"]+)"\]`)
	tomlMilter   = regexp.MustCompile(`(?m)^#?listen = "([^"]+)"`)
	anyPolicy    = regexp.MustCompile(`policy_listen = \["([^"]+)"\]`)
	anyMilter    = regexp.MustCompile(`\[milter\]\s*(?:#[^\n]*\n\s*)*listen = "([^"]+)"`)
	policyClient = regexp.MustCompile("check_policy_service \\{? ?((?:inet|unix):[^\\s,}`]+)")
	milterClient = regexp.MustCompile("smtpd_milters ?= ?\\{? ?((?:inet|unix):[^\\s,}`]+)")
	socketUnit   = regexp.MustCompile("ListenStream=([^\\s`]+)")
	spoolPath    = regexp.MustCompile(`/var/spool/postfix/[\w./-]*\w`)
)

// TestShippedAddressesAgree: the policy service and the milter have one
// address each (and one unix socket path each) in every shipped file: the
// listeners the shipped ratelimitd.toml gives (its policy_listen lines and
// its [milter] listen examples) are the only ones any file names, in the
// TOML as in main.cf's check_policy_service and smtpd_milters, the socket
// units' ListenStream and any path under /var/spool/postfix. So a guide
// cannot send a postmaster to a port or socket the others do not use.
func TestShippedAddressesAgree(t *testing.T) {
	toml := string(Default)
	milterSection := toml[strings.Index(toml, "\n[milter]"):]
	milterSection = milterSection[:strings.Index(milterSection[1:], "\n[")+1]
	listeners := map[string]map[string]bool{"policy": {}, "milter": {}}
	for _, m := range tomlPolicy.FindAllStringSubmatch(toml, -1) {
		listeners["policy"][m[1]] = true
	}
	for _, m := range tomlMilter.FindAllStringSubmatch(milterSection, -1) {
		listeners["milter"][m[1]] = true
	}
	for kind, want := range map[string]int{"policy": 2, "milter": 2} {
		if len(listeners[kind]) != want {
			t.Errorf("ratelimitd.toml gives %d %s listeners, want a TCP and a unix one: %v", len(listeners[kind]), kind, listeners[kind])
		}
	}
	postfix := map[string]map[string]bool{"policy": {}, "milter": {}}
	paths := map[string]bool{}
	for kind, ls := range listeners {
		for l := range ls {
			postfix[kind][postfixForm(l)] = true
			if p, ok := strings.CutPrefix(l, "unix:"); ok {
				paths[p] = true
			}
		}
	}
	if !postfix["policy"]["unix:private/ratelimitd"] {
		t.Errorf("ratelimitd.toml does not give the policy socket the Debian package uses (unix:/var/spool/postfix/private/ratelimitd): %v", listeners["policy"])
	}

	check := func(file, what, got string, want map[string]bool) {
		t.Helper()
		if !want[got] {
			t.Errorf("%s: %s %q, but ratelimitd.toml gives only %s", file, what, got, keys(want))
		}
	}
	seen := map[string]int{}
	named := []struct {
		what string
		re   *regexp.Regexp
		want map[string]bool
	}{
		{"policy_listen", anyPolicy, listeners["policy"]}, {"[milter] listen", anyMilter, listeners["milter"]},
		{"check_policy_service", policyClient, postfix["policy"]}, {"smtpd_milters", milterClient, postfix["milter"]},
		{"ListenStream", socketUnit, paths},
	}
	for file, text := range shippedTexts(t) {
		for _, n := range named {
			for _, m := range n.re.FindAllStringSubmatch(text, -1) {
				check(file, n.what, m[1], n.want)
				seen[n.what]++
			}
		}
		for _, p := range spoolPath.FindAllString(text, -1) {
			if strings.HasPrefix(p, "/var/spool/postfix/private/ratelimitd") {
				check(file, "socket path", p, paths)
			}
			if p == "/var/spool/postfix/ratelimitd" || strings.HasPrefix(p, "/var/spool/postfix/ratelimitd/") {
				t.Errorf("%s: names %s, a socket directory no other file uses (the sockets are %s)", file, p, keys(paths))
			}
		}
	}
	for _, n := range named {
		if seen[n.what] < 2 {
			t.Errorf("%s found %d times: the patterns no longer match the files", n.what, seen[n.what])
		}
	}
}

func keys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}
