//go:build integration && debpackage

package packaging

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
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
	initPath   = "/etc/init.d/ratelimitd"
	logDir     = "/var/log/ratelimitd"
	logFile    = logDir + "/ratelimitd.log"
	pidFile    = "/run/ratelimitd/ratelimitd.pid"
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
// docs, the conffiles, the user and its groups, the units and their
// enablement. On this host without systemd it runs the init script: a
// start on a broken configuration fails with the reason on its output and
// in the log file; the packaged configuration starts as root and runs as
// the user ratelimitd with the policy socket it made in Postfix's
// private/, and a real Postfix gets its first 450 through it. It emulates
// the socket unit with systemd-socket-activate, which makes the socket
// and starts the service's ExecStart as the packaged user with the unit's
// privilege limits at the first connection, and has the same Postfix ask
// it. Back on the init script it holds one message and freezes another
// (reloads switch the limit's action), then checks that dpkg -r stops the
// daemon and keeps the state, and that dpkg -P keeps the quarantine
// aside, says where, and removes the rest, the socket and the user.
func TestDebianPackage(t *testing.T) {
	needRoot(t)
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-shlibdeps", "lintian", "setpriv", "make", "adduser", "systemd-socket-activate", "start-stop-daemon"} {
		needTool(t, tool)
	}
	if _, err := os.Stat("/run/systemd/system"); err == nil {
		t.Fatal("systemd runs on this host: this test runs the init script, which would hand its actions to systemctl")
	}
	takeOverPackage(t)

	deb := buildDeb(t)
	lintianClean(t, deb)

	before, _ := filepath.Glob(stateDir + ".purged-*")
	t.Cleanup(func() {
		if out, err := exec.Command("dpkg", "-P", "ratelimitd").CombinedOutput(); err != nil {
			t.Logf("cleanup: dpkg -P ratelimitd: %v\n%s", err, out)
		}
		// The state a purge kept aside, if this test made it.
		after, _ := filepath.Glob(stateDir + ".purged-*")
		for _, d := range after {
			if !slices.Contains(before, d) {
				os.RemoveAll(d)
			}
		}
	})
	// Postfix first: its harness makes this process the reaper of
	// orphans, the daemons start-stop-daemon puts in the background.
	sink := mtatest.StartSink(t)
	mport := mtatest.FreePort(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "unix:" + socketPath,
		Milter: fmt.Sprintf("inet:127.0.0.1:%d", mport)})

	t.Logf("dpkg -i:\n%s", run(t, "dpkg", "-i", deb))
	if err := os.WriteFile(testMark, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	checkInstalled(t)
	exec := checkUnit(t)
	initScript(t, "stop") // postinst's start, if a policy-rc.d let it run

	// The test's limit: one message per hour, so that the second message
	// shows the daemon's decision in Postfix's reply; the milter, to
	// freeze. No metrics listener (the port may be taken on the test
	// machine).
	conf := readFile(t, confPath)
	conf = replaceLine(t, conf, "limit = 200", "limit = 1")
	conf = replaceLine(t, conf, `metrics_listen = "127.0.0.1:9731"`, `metrics_listen = ""`)
	conf = replaceLine(t, conf, `#listen = "127.0.0.1:10032"`, fmt.Sprintf(`listen = "127.0.0.1:%d"`, mport))
	// The test's Postfix has its own queue, which postqueue run by the
	// daemon's user may not list (postqueue -c needs root): no queue
	// list, the hold is recorded from Postfix's END-OF-MESSAGE request.
	conf = replaceLine(t, conf, "[quarantine]", "[quarantine]\nqueue_list_command = []")

	// A broken configuration: the start fails, saying why, there and in
	// the log file.
	writeConf(t, replaceLine(t, conf, `flush_interval = "1s"`, `flush_interval = "2m"`))
	if out, err := initScript(t, "start"); err == nil || !strings.Contains(out, "flush_interval") {
		t.Errorf("init script start on a broken configuration: %v, want a failure naming flush_interval\n%s", err, out)
	}
	if log := readFile(t, logFile); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "flush_interval") {
		t.Errorf("%s lacks the reason the start failed:\n%s", logFile, log)
	}
	if out, err := initScript(t, "status"); exitCode(err) != 3 {
		t.Errorf("init script status after a failed start: %v, want exit 3 (not running)\n%s", err, out)
	}

	writeConf(t, conf)
	pid := startInit(t)
	alice := mtatest.Mail{Login: "alice", ClientAddr: "192.0.2.7", From: "alice@example.org", To: []string{"bob@example.net"},
		Data: mtatest.BuildMessage("alice@example.org", "bob@example.net", "hi", "hello\n")}
	if err := mtatest.Send(t, pf.Addr(), alice); err != nil {
		t.Fatalf("first message: %v\n%s", err, pf.Log())
	}
	sink.WaitCount(t, 1, 20*time.Second)
	want450(t, pf, alice)
	if st, err := os.Lstat(socketPath); err != nil || st.Mode()&os.ModeSocket == 0 || st.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("%s: %v %v, want the socket the daemon made as root", socketPath, st, err)
	}
	stopInit(t, pid)

	// The systemd units, emulated: without ratelimitd.socket the packaged
	// user cannot make the socket in private/; the daemon says so and
	// where it comes from.
	if out, err := runAsUnit(exec); err == nil || !strings.Contains(string(out), "systemctl start ratelimitd.socket") {
		t.Errorf("ExecStart without the socket unit: %v, want a failure that names ratelimitd.socket\n%s", err, out)
	}
	os.Remove(socketPath) // the init script's daemon's, which could not remove it as its user
	stop, daemonLog := startActivated(t, exec, parseUnit(t, socketUnit))
	// Postfix asks the milter first, at CONNECT: start the daemon with a
	// connection to the socket, as Postfix's first policy request would,
	// and wait for its milter listener.
	if c, err := net.Dial("unix", socketPath); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", mport))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "milter listener of the socket-activated daemon")
	erin := alice
	erin.Login, erin.From = "erin", "erin@example.org"
	if err := mtatest.Send(t, pf.Addr(), erin); err != nil {
		t.Fatalf("first message under the unit: %v\n%s\n%s", err, pf.Log(), daemonLog.String())
	}
	sink.WaitCount(t, 2, 20*time.Second)
	want450(t, pf, erin)
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

	// Back on the init script: carol's second message held, dave's
	// frozen, each limit's action switched by a reload.
	pid = startInit(t)
	carol, dave := alice, alice
	carol.Login, carol.From = "carol", "carol@example.org"
	dave.Login, dave.From = "dave", "dave@example.org"
	for i, step := range []struct {
		action string
		mail   mtatest.Mail
	}{{"hold", carol}, {"freeze", dave}} {
		writeConf(t, strings.Replace(conf, `action = "defer"`, `action = "`+step.action+`"`, 1))
		if out, err := initScript(t, "reload"); err != nil {
			t.Fatalf("reload: %v\n%s", err, out)
		}
		waitFor(t, func() bool { return strings.Count(readFile(t, logFile), `msg="configuration reloaded"`) == i+1 }, "the reload in "+logFile)
		for n := range 2 {
			if err := mtatest.Send(t, pf.Addr(), step.mail); err != nil {
				t.Fatalf("%s, message %d: %v\n%s", step.action, n+1, err, pf.Log())
			}
		}
		sink.WaitCount(t, 3+i, 20*time.Second)
	}
	if _, held := pf.WaitQueue(t, 30*time.Second, func(_, held []string) bool { return len(held) == 1 }); len(held) != 1 {
		t.Fatalf("hold queue %v, want carol's second message", held)
	}
	var list string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		list, _ = exec2(binPath, "quarantine", "list", "--config", confPath, "--state", "held,frozen")
		if strings.Contains(list, " held ") && strings.Contains(list, " frozen ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quarantine list: want a held and a frozen message within 30s:\n%s\n%s\n%s", list, readFile(t, logFile), pf.Log())
		}
	}

	// The listing's count line, "N messages" (the policy service and the
	// milter may each record a hold of the same message).
	count := regexp.MustCompile(`(?m)^([0-9]+) messages$`).FindStringSubmatch(list)
	if count == nil {
		t.Fatalf("quarantine list has no count line:\n%s", list)
	}

	// dpkg -r stops the daemon (no systemd: the init script) and keeps
	// the state.
	run(t, "dpkg", "-r", "ratelimitd")
	waitFor(t, func() bool { return exited(pid) }, fmt.Sprintf("the daemon (pid %d) to exit at dpkg -r", pid))
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

	// dpkg -P keeps the quarantine aside, says where, and both messages
	// can be had back.
	out := run(t, "dpkg", "-P", "ratelimitd")
	kept := regexp.MustCompile(`kept the state directory as (/var/lib/ratelimitd\.purged-[0-9TZ]+)`).FindStringSubmatch(out)
	if kept == nil || !strings.Contains(out, "holds "+count[1]+" held or frozen messages") {
		t.Fatalf("dpkg -P did not say where it kept the quarantine of %s messages:\n%s", count[1], out)
	}
	t.Logf("dpkg -P:\n%s", out)
	recovered := filepath.Join(t.TempDir(), "recovered.toml")
	if err := os.WriteFile(recovered, []byte(fmt.Sprintf("[server]\nstate_dir = %q\nadmin_socket = %q\n[policy]\nlimits = \"none\"\n",
		kept[1], filepath.Join(filepath.Dir(recovered), "admin.sock"))), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := exec2(filepath.Join(filepath.Dir(deb), "stage", "ratelimitd"), "quarantine", "list", "--config", recovered)
	if err != nil || !strings.Contains(list, "\n"+count[0]+"\n") || !strings.Contains(list, " held ") || !strings.Contains(list, " frozen ") {
		t.Errorf("the kept quarantine: %v, want the held and the frozen message, %s\n%s", err, count[0], list)
	}
	if _, held := pf.QueueIDs(t); len(held) != 1 {
		t.Errorf("Postfix's hold queue %v after dpkg -P, want the held message", held)
	}
	for _, p := range []string{stateDir, socketPath, "/etc/ratelimitd", unitPath, socketUnit, initPath, logDir, "/run/ratelimitd",
		"/etc/rc2.d/S01ratelimitd", "/etc/systemd/system/multi-user.target.wants/ratelimitd.service", "/etc/systemd/system/sockets.target.wants/ratelimitd.socket"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("dpkg -P left %s: %v", p, err)
		}
	}
	if rc, _ := filepath.Glob("/etc/rc?.d/[SK][0-9][0-9]ratelimitd"); len(rc) > 0 {
		t.Errorf("dpkg -P left the init script's links %v", rc)
	}
	if _, err := user.Lookup("ratelimitd"); err == nil {
		t.Error("dpkg -P left the user ratelimitd")
	}
	if _, err := user.LookupGroup("ratelimitd"); err == nil {
		t.Error("dpkg -P left the group ratelimitd")
	}
}

// initScript runs the installed init script with action and returns its
// output.
func initScript(t *testing.T, action string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, initPath, action)
	cmd.Env, cmd.Dir = unitEnv, "/"
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// startInit starts the daemon with the init script and checks that it
// runs, as the user ratelimitd with its groups, and says so in status;
// it returns the daemon's process ID, which this process reaps once the
// daemon exits (this test is the reaper of the orphans it starts).
func startInit(t *testing.T) int {
	t.Helper()
	if out, err := initScript(t, "start"); err != nil {
		t.Fatalf("init script start: %v\n%s\n%s", err, out, readFile(t, logFile))
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("no pid file after the init script's start: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	go syscall.Wait4(pid, nil, 0, nil)
	if out, err := initScript(t, "status"); err != nil || !strings.Contains(out, "running (pid "+strconv.Itoa(pid)+")") {
		t.Errorf("init script status: %v\n%s", err, out)
	}
	u, err := user.Lookup("ratelimitd")
	if err != nil {
		t.Fatal(err)
	}
	status := readFile(t, fmt.Sprintf("/proc/%d/status", pid))
	if want := fmt.Sprintf("Uid:\t%[1]s\t%[1]s\t%[1]s\t%[1]s\n", u.Uid); !strings.Contains(status, want) {
		t.Errorf("the daemon does not run as ratelimitd (uid %s) for good:\n%s", u.Uid, status)
	}
	return pid
}

// stopInit stops the daemon pid with the init script.
func stopInit(t *testing.T, pid int) {
	t.Helper()
	if out, err := initScript(t, "stop"); err != nil {
		t.Fatalf("init script stop: %v\n%s", err, out)
	}
	if !exited(pid) {
		t.Fatalf("the daemon (pid %d) runs after the init script's stop", pid)
	}
	if !strings.Contains(readFile(t, logFile), `msg="ratelimitd stopped"`) {
		t.Errorf("no clean shutdown in %s", logFile)
	}
}

// want450 sends m and wants the packaged daemon's 450.
func want450(t *testing.T, pf *mtatest.Postfix, m mtatest.Mail) {
	t.Helper()
	err := mtatest.Send(t, pf.Addr(), m)
	var se *mtatest.SendError
	if !errors.As(err, &se) || se.Code() != 450 || !strings.Contains(err.Error(), "too much mail from "+m.Login) {
		t.Fatalf("second message of %s: %v; want a 450 from the packaged daemon (limit 1 per hour)\n%s", m.Login, err, pf.Log())
	}
}

// exited reports whether process pid is gone (or a zombie).
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return err != nil || strings.Contains(string(b), "State:\tZ")
}

// exitCode is err's exit status (0 for nil, -1 if it is not an exit).
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// exec2 runs name with args and returns its combined output.
func exec2(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// waitFor polls cond for up to 30 s and fails the test naming what.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 30s", what)
		}
	}
}

// writeConf writes the packaged configuration file.
func writeConf(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(confPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
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
		"/usr/share/doc/ratelimitd/copyright", "/usr/share/doc/ratelimitd/changelog.Debian.gz", unitPath, socketUnit,
		"/usr/share/doc/ratelimitd/README.md", "/usr/share/doc/ratelimitd/postfix.md", "/usr/share/doc/ratelimitd/operations.md",
		"/usr/share/doc/ratelimitd/console.md", "/usr/share/doc/ratelimitd/debian.md", "/usr/share/doc/ratelimitd/examples/postfix-main.cf",
		"/usr/share/doc/ratelimitd/examples/postfix-master.cf", "/usr/share/doc/ratelimitd/examples/exim-acl.conf",
		"/usr/share/doc/ratelimitd/examples/prometheus-alerts.yml", "/usr/share/doc/ratelimitd/examples/grafana-dashboard.json", logDir} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	conffiles, err := exec.Command("dpkg-query", "-W", "-f", "${Conffiles}", "ratelimitd").Output()
	for _, p := range []string{confPath, initPath} {
		if err != nil || !strings.Contains(string(conffiles), p) {
			t.Errorf("%s is not a conffile: %q %v", p, conffiles, err)
		}
	}
	if st, err := os.Stat(initPath); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v %v", initPath, st, err)
	}
	conf := readFile(t, confPath)
	for _, want := range []string{`state_dir = "/var/lib/ratelimitd"`, `policy_listen = ["unix:` + socketPath + `"]`, `socket_group = "postfix"`,
		`user = "ratelimitd"`, `group = "ratelimitd"`} {
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
