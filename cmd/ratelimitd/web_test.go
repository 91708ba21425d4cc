package main

import (
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/ratelimitd/ratelimitd/web"
)

// TestWebUserAddRemove: `web user add` stores an argon2id hash of the
// password read from stdin with the role, in [web] users_file with mode
// 0600; `web user remove` takes the user out; a bad role is a usage error.
func TestWebUserAddRemove(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	cfg := filepath.Join(dir, "r.toml")
	os.WriteFile(cfg, []byte("[server]\nstate_dir = \""+dir+"\"\n[web]\nusers_file = \""+users+"\"\n[[limit]]\nname = \"x\"\nkey = \"sender\"\nlimit = 1\nperiod = \"1h\"\n"), 0o644)
	code, out, errs := runCLI(t, "s3cret-password\n", "--config", cfg, "web", "user", "add", "alice", "--role", "operator", "--password-stdin")
	if code != 0 || !strings.Contains(out, "added console user alice (operator)") {
		t.Fatalf("add: %d %q %q", code, out, errs)
	}
	b, _ := os.ReadFile(users)
	if strings.Contains(string(b), "s3cret") || strings.Contains(out+errs, "$argon2id") {
		t.Fatalf("the password or its hash leaked: file %q, output %q", b, out+errs)
	}
	if fi, _ := os.Stat(users); fi.Mode().Perm() != 0o600 {
		t.Errorf("users file mode %v", fi.Mode().Perm())
	}
	u, err := web.LoadUsers(users)
	if err != nil {
		t.Fatal(err)
	}
	if x, ok := u.Verify("alice", []byte("s3cret-password")); !ok || x.Role != web.Operator {
		t.Fatalf("alice does not verify as an operator")
	}
	if code, _, errs := runCLI(t, "x\n", "--config", cfg, "web", "user", "add", "bob", "--role", "admin", "--password-stdin"); code != 2 || !strings.Contains(errs, "viewer or operator") {
		t.Errorf("bad role: %d %q", code, errs)
	}
	if code, out, _ := runCLI(t, "", "--config", cfg, "web", "user", "list"); code != 0 || out != "alice\toperator\t(all domains)\n" {
		t.Errorf("list: %d %q", code, out)
	}
	if code, out, errs := runCLI(t, "", "--config", cfg, "web", "user", "remove", "alice"); code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("remove: %d %q %q", code, out, errs)
	}
	if code, _, _ := runCLI(t, "", "--config", cfg, "web", "user", "remove", "alice"); code == 0 {
		t.Errorf("removing a missing user succeeded")
	}
}

// TestWebUserAddDomains: --domain (repeatable) makes a domain operator;
// the domains are stored canonical (lower case, IDNA A-labels) and listed;
// a re-add changes them; "@example.org" and "a b" are usage errors that
// change nothing.
func TestWebUserAddDomains(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	cfg := filepath.Join(dir, "r.toml")
	os.WriteFile(cfg, []byte("[server]\nstate_dir = \""+dir+"\"\n[web]\nusers_file = \""+users+"\"\n[policy]\nlimits = \"none\"\n"), 0o644)
	add := func(domains ...string) (int, string, string) {
		args := []string{"--config", cfg, "web", "user", "add", "dora", "--role", "operator", "--password-stdin"}
		for _, d := range domains {
			args = append(args, "--domain", d)
		}
		return runCLI(t, "s3cret-password\n", args...)
	}
	if code, out, errs := add("Example.ORG", "bücher.example"); code != 0 || !strings.Contains(out, "added console user dora (operator of example.org, xn--bcher-kva.example)") {
		t.Fatalf("add: %d %q %q", code, out, errs)
	}
	list := func() string {
		_, out, _ := runCLI(t, "", "--config", cfg, "web", "user", "list")
		return out
	}
	if got := list(); got != "dora\toperator\texample.org,xn--bcher-kva.example\n" {
		t.Errorf("list: %q", got)
	}
	for _, bad := range []string{"@example.org", "a b", "example..org"} {
		if code, _, errs := add(bad); code != 2 || !strings.Contains(errs, "want a domain name") {
			t.Errorf("--domain %q: %d %q", bad, code, errs)
		}
	}
	if code, out, errs := add("example.net"); code != 0 || !strings.Contains(out, "updated console user dora (operator of example.net)") {
		t.Fatalf("re-add: %d %q %q", code, out, errs)
	}
	if got := list(); got != "dora\toperator\texample.net\n" {
		t.Errorf("list after re-add: %q", got)
	}
}

// TestWebUserAddAsRootForDaemonUser: run as root with [server] user set,
// `web user add` leaves the users file root's and readable by the
// daemon's group (0640), which reads it after dropping to that user.
func TestWebUserAddAsRootForDaemonUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the file is given to the daemon's group")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	cfg := filepath.Join(dir, "r.toml")
	os.WriteFile(cfg, []byte("[server]\nuser = \"nobody\"\nstate_dir = \""+dir+"\"\n[web]\nusers_file = \""+users+"\"\n[[limit]]\nname = \"x\"\nkey = \"sender\"\nlimit = 1\nperiod = \"1h\"\n"), 0o644)
	for range 2 { // added, then updated: each save keeps the sharing
		if code, out, errs := runCLI(t, "s3cret-password\n", "--config", cfg, "web", "user", "add", "alice", "--role", "viewer", "--password-stdin"); code != 0 {
			t.Fatalf("add: %d %q %q", code, out, errs)
		}
		fi, err := os.Stat(users)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o640 || st.Uid != 0 || strconv.Itoa(int(st.Gid)) != nobody.Gid {
			t.Errorf("users file %v %d:%d, want 0640 root:%s (the daemon's group)", fi.Mode().Perm(), st.Uid, st.Gid, nobody.Gid)
		}
	}
}
