//go:build integration && debpackage

package packaging

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// Paths the package installs or creates.
const (
	binPath    = "/usr/sbin/ratelimitd"
	confPath   = "/etc/ratelimitd/ratelimitd.toml"
	unitPath   = "/lib/systemd/system/ratelimitd.service"
	socketUnit = "/lib/systemd/system/ratelimitd.socket"
	stateDir   = "/var/lib/ratelimitd"
	// socketPath is the policy socket ratelimitd.socket makes, in the
	// host's Postfix queue (the test's Postfix names it by this path).
	socketPath = "/var/spool/postfix/private/ratelimitd"
	// testMark marks a package installed by this test, so that a later
	// run may purge what an interrupted one left behind.
	testMark = stateDir + "/.installed-by-packaging-test"
)

// TestDebianPackage builds the package with make deb, checks it with
// lintian (no errors), installs it with dpkg -i and checks the files, the
// conffile, the user and its groups, the units and their enablement;
// emulates the socket unit with systemd-socket-activate, which makes the
// policy socket in /var/spool/postfix/private and starts the service's
// ExecStart as the packaged user with the unit's privilege limits (no new
// privileges, no capabilities) at the first connection, and has a real
// Postfix ask it over that socket (first message delivered, second
// deferred); then checks that dpkg -r keeps the state and dpkg -P removes
// it, the socket and the user.
func TestDebianPackage(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-shlibdeps", "lintian", "setpriv", "make", "adduser", "systemd-socket-activate"} {
		needTool(t, tool)
	}
	takeOverPackage(t)

	deb := buildDeb(t)
	lintianClean(t, deb)

	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "-P", "ratelimitd").CombinedOutput(); err != nil {
			t.Logf("cleanup: dpkg -P ratelimitd: %v\n%s", err, out)
		}
	})
	run(t, "dpkg", "-i", deb)
	if err := os.WriteFile(testMark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	checkInstalled(t)
	exec := checkUnit(t)

	// The test's limit: one message per hour, so that the second message
	// shows the daemon's decision in Postfix's reply. No metrics listener
	// (the port may be taken on the test machine).
	conf := readFile(t, confPath)
	conf = replaceLine(t, conf, "limit = 200", "limit = 1")
	conf = replaceLine(t, conf, `metrics_listen = "127.0.0.1:9731"`, `metrics_listen = ""`)
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}

	// Without ratelimitd.socket the packaged user cannot make the socket
	// in private/; the daemon says so and where it comes from.
	if out, err := runAsUnit(exec); err == nil || !strings.Contains(string(out), "systemctl start ratelimitd.socket") {
		t.Errorf("ExecStart without the socket unit: %v, want a failure that names ratelimitd.socket\n%s", err, out)
	}

	stop, daemonLog := startActivated(t, exec, parseUnit(t, socketUnit))
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "unix:" + socketPath})
	mail := mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7", From: "alice@example.org", To: []string{"bob@example.net"},
		Data: mtatest.BuildMessage("alice@example.org", "bob@example.net", "hi", "hello\n")}
	if err := mtatest.Send(t, pf.Addr(), mail); err != nil {
		t.Fatalf("first message: %v\n%s", err, pf.Log())
	}
	sink.WaitCount(t, 1, 20*time.Second)
	err := mtatest.Send(t, pf.Addr(), mail)
	var se *mtatest.SendError
	if !errors.As(err, &se) || se.Code() != 450 || !strings.Contains(err.Error(), "too much mail from alice") {
		t.Fatalf("second message: %v; want a 450 from the packaged daemon (limit 1 per hour)\n%s", err, pf.Log())
	}
	if !strings.Contains(daemonLog.String(), "policy unix:"+socketPath+" (from systemd)") {
		t.Errorf("the daemon did not serve the socket it was passed:\n%s", daemonLog.String())
	}
	stop()
	if _, err := os.Stat(filepath.Join(stateDir, "ratelimitd.db")); err != nil {
		t.Fatalf("no state file after the daemon stopped: %v", err)
	}
	// The socket is the socket unit's: the daemon leaves it at exit.
	if st, err := os.Lstat(socketPath); err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Errorf("the daemon removed the passed socket %s at exit: %v", socketPath, err)
	}

	run(t, "dpkg", "-r", "ratelimitd")
	for _, p := range []string{filepath.Join(stateDir, "ratelimitd.db"), confPath} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("dpkg -r removed %s: %v", p, err)
		}
	}
	if _, err := os.Stat(binPath); !os.IsNotExist(err) {
		t.Errorf("dpkg -r left %s: %v", binPath, err)
	}
	if _, err := user.Lookup("ratelimitd"); err != nil {
		t.Errorf("dpkg -r removed the user: %v", err)
	}

	run(t, "dpkg", "-P", "ratelimitd")
	for _, p := range []string{stateDir, socketPath, "/etc/ratelimitd", unitPath, socketUnit,
		"/etc/systemd/system/multi-user.target.wants/ratelimitd.service", "/etc/systemd/system/sockets.target.wants/ratelimitd.socket"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("dpkg -P left %s: %v", p, err)
		}
	}
	if _, err := user.Lookup("ratelimitd"); err == nil {
		t.Error("dpkg -P left the user ratelimitd")
	}
	if _, err := user.LookupGroup("ratelimitd"); err == nil {
		t.Error("dpkg -P left the group ratelimitd")
	}
}

// takeOverPackage fails the test if a ratelimitd package, user or state
// directory exists that this test did not create; one an interrupted run
// left behind is purged.
func takeOverPackage(t *testing.T) {
	t.Helper()
	status, _ := exec.Command("dpkg-query", "-W", "-f", "${db:Status-Abbrev}", "ratelimitd").Output()
	installed := len(status) > 1 && status[1] != 'n' // "ii ", "rc " ...
	_, markErr := os.Stat(testMark)
	switch {
	case installed && markErr == nil:
		t.Log("purging the ratelimitd package an earlier run of this test left installed")
		run(t, "dpkg", "-P", "ratelimitd")
	case installed:
		t.Fatalf("a ratelimitd package is installed (%s) that this test did not install: purge it first (dpkg -P ratelimitd)", strings.TrimSpace(string(status)))
	}
	for _, p := range []string{stateDir, socketPath} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists: this test would remove it with dpkg -P; move it away first", p)
		}
	}
	if _, err := user.Lookup("ratelimitd"); err == nil {
		t.Fatal("a user ratelimitd exists: this test would remove it with dpkg -P; remove it first")
	}
}

// buildDeb runs make deb into a temporary directory and returns the
// package's path.
func buildDeb(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "deb", "DEBDIR="+out, "GO="+goBinary(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, b)
	}
	debs, _ := filepath.Glob(filepath.Join(out, "ratelimitd_*_amd64.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %v, want one ratelimitd_VERSION_amd64.deb", debs)
	}
	return debs[0]
}

// lintianClean fails the test on any lintian error and logs the rest.
func lintianClean(t *testing.T, deb string) {
	t.Helper()
	out, err := exec.Command("lintian", "--tag-display-limit", "0", deb).CombinedOutput()
	var errs []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "E: ") {
			errs = append(errs, l)
		}
	}
	t.Logf("lintian:\n%s", out)
	if len(errs) > 0 {
		t.Fatalf("lintian errors:\n%s", strings.Join(errs, "\n"))
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("lintian: %v", err)
	}
}

// checkInstalled checks the installed files, the conffile and the user.
func checkInstalled(t *testing.T) {
	t.Helper()
	if st, err := os.Stat(binPath); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v %v", binPath, st, err)
	}
	for _, p := range []string{"/usr/share/man/man8/ratelimitd.8.gz", "/usr/share/man/man8/ratelimitd-serve.8.gz",
		"/usr/share/doc/ratelimitd/copyright", "/usr/share/doc/ratelimitd/changelog.Debian.gz", unitPath, socketUnit} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	conffiles, err := exec.Command("dpkg-query", "-W", "-f", "${Conffiles}", "ratelimitd").Output()
	if err != nil || !strings.Contains(string(conffiles), confPath) {
		t.Errorf("%s is not a conffile: %q %v", confPath, conffiles, err)
	}
	conf := readFile(t, confPath)
	for _, want := range []string{`state_dir = "/var/lib/ratelimitd"`, `policy_listen = ["unix:` + socketPath + `"]`, `socket_group = "postfix"`} {
		if !slices.Contains(strings.Split(conf, "\n"), want) {
			t.Errorf("%s lacks the line %s", confPath, want)
		}
	}
	u, err := user.Lookup("ratelimitd")
	if err != nil {
		t.Fatalf("postinst created no user: %v", err)
	}
	gids, _ := u.GroupIds()
	var groups []string
	for _, g := range gids {
		if gr, err := user.LookupGroupId(g); err == nil {
			groups = append(groups, gr.Name)
		}
	}
	for _, want := range []string{"ratelimitd", "postfix", "postdrop"} {
		if !slices.Contains(groups, want) {
			t.Errorf("user ratelimitd is in groups %v, not in %s", groups, want)
		}
	}
	if u.HomeDir != stateDir {
		t.Errorf("user ratelimitd's home is %s, want %s", u.HomeDir, stateDir)
	}
	// postinst enables both units (deb-systemd-helper, without a running
	// systemd too).
	for _, link := range []string{"/etc/systemd/system/multi-user.target.wants/ratelimitd.service",
		"/etc/systemd/system/sockets.target.wants/ratelimitd.socket"} {
		if dst, err := os.Readlink(link); err != nil || filepath.Base(dst) != filepath.Base(link) {
			t.Errorf("postinst did not enable the unit: %s -> %q (%v)", link, dst, err)
		}
	}
	for dir, owner := range map[string][2]string{stateDir: {"ratelimitd", "ratelimitd"}} {
		st, err := os.Stat(dir)
		if err != nil {
			t.Errorf("postinst made no %s: %v", dir, err)
			continue
		}
		sys := st.Sys().(*syscall.Stat_t)
		uo, _ := user.LookupId(strconv.Itoa(int(sys.Uid)))
		g, _ := user.LookupGroupId(strconv.Itoa(int(sys.Gid)))
		if uo == nil || g == nil || uo.Username != owner[0] || g.Name != owner[1] || st.Mode().Perm() != 0o750 {
			t.Errorf("%s: %v uid %d gid %d, want %s:%s 0750", dir, st.Mode(), sys.Uid, sys.Gid, owner[0], owner[1])
		}
	}
}

// checkUnit checks the installed units: with systemd-analyze verify where
// systemd is installed, and always by their keys (the service's user,
// state directory and hardening; the socket's path, owner and mode). It
// returns ExecStart's command line.
func checkUnit(t *testing.T) []string {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err == nil {
		t.Log("systemd is installed: systemd-analyze verify " + unitPath + " " + socketUnit)
		run(t, "systemd-analyze", "verify", unitPath, socketUnit)
	} else {
		t.Log("systemd is not installed: the units are checked by their keys only")
	}
	sockKeys := parseUnit(t, socketUnit)
	for k, v := range map[string]string{"Socket.ListenStream": socketPath, "Socket.SocketUser": "postfix",
		"Socket.SocketGroup": "postfix", "Socket.SocketMode": "0660", "Install.WantedBy": "sockets.target"} {
		if got := sockKeys[k]; len(got) != 1 || got[0] != v {
			t.Errorf("socket unit: %s = %q, want %q", k, got, v)
		}
	}
	keys := parseUnit(t, unitPath)
	want := map[string]string{
		"Service.User": "ratelimitd", "Service.StateDirectory": "ratelimitd", "Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem": "strict", "Service.ProtectHome": "yes", "Service.PrivateTmp": "yes",
		"Service.RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6", "Service.CapabilityBoundingSet": "",
		"Install.WantedBy": "multi-user.target",
	}
	for k, v := range want {
		if got, ok := keys[k]; !ok || len(got) != 1 || got[0] != v {
			t.Errorf("unit: %s = %q, want %q", k, got, v)
		}
	}
	if !slices.Contains(keys["Unit.Wants"], "ratelimitd.socket") || !slices.Contains(keys["Install.Also"], "ratelimitd.socket") {
		t.Errorf("unit: Wants = %q, Also = %q, want ratelimitd.socket in both", keys["Unit.Wants"], keys["Install.Also"])
	}
	execStart := keys["Service.ExecStart"]
	if len(execStart) != 1 {
		t.Fatalf("unit: ExecStart = %q, want one", execStart)
	}
	args := strings.Fields(execStart[0])
	if len(args) < 2 || args[0] != binPath || args[1] != "serve" {
		t.Fatalf("unit: ExecStart = %q, want %s serve ...", execStart[0], binPath)
	}
	return args
}

// parseUnit reads a systemd unit file into "Section.Key" -> values (a key
// may repeat).
func parseUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	keys := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(readFile(t, path)))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[':
			section = strings.Trim(l, "[]")
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("%s: not a key=value line: %q", path, l)
			}
			keys[section+"."+strings.TrimSpace(k)] = append(keys[section+"."+strings.TrimSpace(k)], strings.TrimSpace(v))
		}
	}
	return keys
}

// unitEnv is the environment systemd gives a service: PATH, and LANG
// from the system locale.
var unitEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}

// asUnit is the setpriv prefix that runs a command as systemd runs the
// unit's, as far as this test can without systemd: user ratelimitd with
// its groups, no new privileges, no capabilities (bounding, inheritable,
// ambient).
var asUnit = []string{"setpriv", "--reuid", "ratelimitd", "--regid", "ratelimitd", "--init-groups", "--no-new-privs",
	"--bounding-set", "-all", "--inh-caps", "-all", "--ambient-caps", "-all", "--"}

// runAsUnit runs args as the unit's user, without a socket passed, for
// at most 20 s, and returns its output.
func runAsUnit(args []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, asUnit[0], append(slices.Clone(asUnit[1:]), args...)...)
	cmd.Env, cmd.Dir = unitEnv, "/"
	return cmd.CombinedOutput()
}

// startActivated emulates the socket unit (keys: its parsed file) with
// systemd-socket-activate: it makes the socket at ListenStream, which the
// test then gives SocketUser, SocketGroup and SocketMode, and at the first
// connection execs args as the unit's user (runAsUnit's setpriv) with the
// socket passed as descriptor 3 (LISTEN_FDS=1, LISTEN_PID, LISTEN_FDNAMES
// ratelimitd.socket). It returns a function that stops the daemon with
// SIGTERM and waits for it, and the daemon's output.
func startActivated(t *testing.T, args []string, keys map[string][]string) (stop func(), log *mtatest.SyncBuffer) {
	t.Helper()
	one := func(k string) string {
		if v := keys[k]; len(v) == 1 {
			return v[0]
		}
		t.Fatalf("socket unit: %s = %q, want one", k, keys[k])
		return ""
	}
	listen := one("Socket.ListenStream")
	owner, err := user.Lookup(one("Socket.SocketUser"))
	if err != nil {
		t.Fatal(err)
	}
	group, err := user.LookupGroup(one("Socket.SocketGroup"))
	if err != nil {
		t.Fatal(err)
	}
	mode, err := strconv.ParseUint(one("Socket.SocketMode"), 8, 32)
	if err != nil {
		t.Fatal(err)
	}
	sa := []string{"systemd-socket-activate", "--listen=" + listen, "--fdname=ratelimitd.socket"}
	for _, e := range unitEnv {
		sa = append(sa, "--setenv="+e)
	}
	cmd := exec.Command(sa[0], append(append(sa[1:], asUnit...), args...)...)
	cmd.Dir = "/"
	log = &mtatest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("daemon exited with %v\n%s", err, log.String())
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("daemon did not stop within 20s of SIGTERM\n%s", log.String())
		}
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if st, err := os.Lstat(listen); err == nil && st.Mode()&os.ModeSocket != 0 {
			break
		}
		select {
		case err := <-done:
			stopped = true
			t.Fatalf("systemd-socket-activate exited: %v\n%s", err, log.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s after 15s\n%s", listen, log.String())
		}
	}
	uid, _ := strconv.Atoi(owner.Uid)
	gid, _ := strconv.Atoi(group.Gid)
	if err := os.Lchown(listen, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(listen, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	t.Logf("socket %s (%s:%s %04o) made as the socket unit would; at the first connection: %s",
		listen, owner.Username, group.Name, mode, strings.Join(cmd.Args, " "))
	return stop, log
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test installs a Debian package: run it as root")
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// replaceLine replaces the first line equal to old by repl.
func replaceLine(t *testing.T, text, old, repl string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	i := slices.Index(lines, old)
	if i < 0 {
		t.Fatalf("no line %q", old)
	}
	lines[i] = repl
	return strings.Join(lines, "\n")
}
