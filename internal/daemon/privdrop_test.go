package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
)

// serveChildEnv names the configuration TestServeChild serves.
const serveChildEnv = "RATELIMITD_TEST_SERVE_CONFIG"

// TestServeChild is not a test: run by TestPrivilegeDrop as a child
// process, it runs Serve (which may drop this process's privileges for
// good) on the configuration $RATELIMITD_TEST_SERVE_CONFIG with the log
// and pid files beside it, and exits with serve's status.
func TestServeChild(t *testing.T) {
	path := os.Getenv(serveChildEnv)
	if path == "" {
		t.Skip("run by TestPrivilegeDrop")
	}
	files := &Files{LogPath: path + ".log", PidPath: filepath.Join(filepath.Dir(path), "run", "ratelimitd.pid")}
	f, err := config.Load(path)
	if err == nil {
		err = Serve(f, path, files, Options{}, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestPrivilegeDrop starts the daemon as root with server.user =
// "nobody" (in a child process: the drop is for good) and checks that it
// refuses a state directory or state file the user cannot write, naming
// the owner and the chown, never calling it damaged; and, once the
// directory is the user's, that it opens the policy socket in a
// directory only root may enter (as Postfix's private/), runs every
// thread as the user and its group with no way back, answers over that
// socket, and leaves the state file and the log file to the user. The
// start is repeated.
func TestPrivilegeDrop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the privilege drop needs root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	grp, err := user.LookupGroupId(nobody.Gid)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir := t.TempDir()
	// The user must reach its state directory.
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	private := filepath.Join(dir, "private")
	state := filepath.Join(dir, "state")
	for _, d := range []string{private, state, filepath.Join(dir, "run")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(filepath.Join(dir, "run"), uid, gid); err != nil {
		t.Fatal(err)
	}
	sock := "unix:" + filepath.Join(private, "ratelimitd")
	path := testConfig(t, dir, sock, "user = \"nobody\"\n")

	// The state directory is root's.
	out, err := runServeChild(t, path)
	logText := readLog(t, path)
	want := fmt.Sprintf("%s is owned by root:root (mode 0700), the daemon runs as nobody: chown -R nobody:%s %s", state, grp.Name, state)
	if err == nil || !strings.Contains(out, want) || !strings.Contains(logText, want) || strings.Contains(out+logText, "damaged") {
		t.Fatalf("root's state directory: %v, want exit 1 and %q on stderr and in the log\nstderr: %s\nlog: %s", err, want, out, logText)
	}
	// The directory is the user's, the state file root's (an earlier
	// run as root).
	if err := os.Chown(state, uid, gid); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(state, "ratelimitd.db")
	if err := os.WriteFile(db, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = runServeChild(t, path)
	want = fmt.Sprintf("%s is owned by root:root (mode 0600), the daemon runs as nobody: chown -R nobody:%s %s", db, grp.Name, state)
	if err == nil || !strings.Contains(out, want) || strings.Contains(out, "damaged") {
		t.Fatalf("root's state file: %v, want exit 1 and %q\n%s", err, want, out)
	}
	// The same file, the daemon started as the user itself (as
	// start-stop-daemon --chuid or systemd's User= start it): statedb
	// names the permission problem, not damage.
	bin := filepath.Join(dir, "daemon.test")
	copyFile(t, os.Args[0], bin)
	cmd, logs := startChild(t, bin, path, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)})
	err = waitExit(cmd)
	want = fmt.Sprintf("%s is owned by root:root (mode 0600), the daemon runs as nobody: chown -R nobody:%s %s", db, grp.Name, state)
	if err == nil || !strings.Contains(logs.String(), want) || strings.Contains(logs.String(), "damaged") {
		t.Fatalf("root's state file, started as the user: %v, want exit 1 and %q\n%s", err, want, logs)
	}
	os.Remove(db)

	td := &testDaemon{t: t, policyAddr: sock}
	for i := range 3 {
		cmd, logs := startServeChild(t, path)
		pid := waitPid(t, filepath.Join(dir, "run", "ratelimitd.pid"), cmd, logs)
		checkIDs(t, pid, uid, gid)
		for j := range 3 {
			if got := td.message("alice", "RCPT"); !strings.HasPrefix(got, "action=") {
				t.Fatalf("start %d, request %d: %q", i, j, got)
			}
		}
		// SIGHUP reopens the log file as the user. The test waits for
		// the reload before SIGTERM: two signals sent back to back may
		// be taken by two threads and reach the daemon in either order.
		cmd.Process.Signal(syscall.SIGHUP)
		waitLog(t, path, `msg="configuration reloaded"`, i+1, logs)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := waitExit(cmd); err != nil {
			t.Fatalf("start %d: serve exited with %v\n%s", i, err, logs)
		}
		for _, p := range []string{db, path + ".log"} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid || int(st.Gid) != gid {
				t.Errorf("start %d: %s is owned by %d:%d, want the user's %d:%d", i, p, st.Uid, st.Gid, uid, gid)
			}
		}
	}
	if l := readLog(t, path); strings.Count(l, `msg="dropped privileges" user=nobody`) != 3 || strings.Count(l, `msg="configuration reloaded"`) != 3 {
		t.Errorf("log: want 3 drops and 3 reloads:\n%s", l)
	}
}

// runServeChild runs TestServeChild on the configuration at path to its
// end and returns its standard error.
func runServeChild(t *testing.T, path string) (string, error) {
	t.Helper()
	cmd, logs := startServeChild(t, path)
	err := waitExit(cmd)
	return logs.String(), err
}

// startServeChild starts TestServeChild on the configuration at path.
func startServeChild(t *testing.T, path string) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	return startChild(t, os.Args[0], path, nil)
}

// startChild starts TestServeChild of the test binary bin on the
// configuration at path, as cred (nil: this process's user).
func startChild(t *testing.T, bin, path string, cred *syscall.Credential) (*exec.Cmd, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestServeChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), serveChildEnv+"="+path)
	cmd.Dir = filepath.Dir(path)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	logs := &strings.Builder{}
	cmd.Stderr, cmd.Stdout = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, logs
}

// waitExit waits up to a minute for cmd to exit.
func waitExit(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		return errors.New("did not exit within a minute")
	}
}

// waitPid waits for the pid file the started child writes and returns
// the process ID in it.
func waitPid(t *testing.T, path string, cmd *exec.Cmd, logs *strings.Builder) int {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid == cmd.Process.Pid {
				return pid
			}
		}
	}
	t.Fatalf("no pid file %s within a minute\n%s", path, logs)
	return 0
}

// checkIDs checks that every thread of process pid runs with uid and gid
// as its real, effective, saved and file-system IDs.
func checkIDs(t *testing.T, pid, uid, gid int) {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("no threads of %d: %v", pid, err)
	}
	wantUID := fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d", uid, uid, uid, uid)
	wantGID := fmt.Sprintf("Gid:\t%d\t%d\t%d\t%d", gid, gid, gid, gid)
	for _, task := range tasks {
		b, err := os.ReadFile(task)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, wantUID+"\n") || !strings.Contains(s, wantGID+"\n") || strings.Contains(s, "Groups:\t0 ") {
			t.Errorf("%s runs with other IDs than %d:%d:\n%s", task, uid, gid, s)
		}
	}
}

// readLog is the log file TestServeChild writes for path.
func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path + ".log")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}

// waitLog waits up to a minute for the log file beside the configuration
// at path to hold n lines containing text.
func waitLog(t *testing.T, path, text string, n int, logs *strings.Builder) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if strings.Count(readLog(t, path), text) >= n {
			return
		}
	}
	t.Fatalf("log: no %d lines with %q within a minute\n%s\n%s", n, text, readLog(t, path), logs)
}

// copyFile copies the executable src to dst (mode 0755).
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
