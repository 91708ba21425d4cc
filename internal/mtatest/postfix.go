package mtatest

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PostfixOptions configures StartPostfix. The zero value is a Postfix that
// relays nowhere (mail stays deferred) and asks no policy service.
type PostfixOptions struct {
	SinkAddr string // "127.0.0.1:PORT": the relayhost; empty: mail stays deferred
	// PolicyService ("inet:HOST:PORT" or "unix:/path") is asked at RCPT and
	// END-OF-MESSAGE, timeout=10s, default_action=DUNNO.
	PolicyService string
	// Milter ("inet:HOST:PORT" or "unix:/path") becomes smtpd_milters
	// (tempfail by default, protocol 6); else MilterPrivate names a socket
	// in private/ (Postfix.PrivateSocket).
	Milter, MilterPrivate string
	ReinjectPort          bool              // a second smtpd (Postfix.ReinjectAddr) without milter or policy service
	ExtraMainCF           map[string]string // main.cf parameters set over the harness's
}

// Postfix is a running private instance, safe for concurrent use, removed
// at t.Cleanup (MTATEST_KEEP=1 keeps the directory).
type Postfix struct {
	ReinjectAddr string // the re-injection smtpd's address (ReinjectPort)

	root     string // temporary directory holding everything below
	confDir  string // root/etc: main.cf, master.cf
	queueDir string // root/queue
	logFile  string // root/maillog
	addr     string // the smtp inet service
	master   string // path of the master binary
	cmdDir   string // command_directory

	cmd    *exec.Cmd
	exited chan struct{} // closed when the master has exited
	output SyncBuffer    // master's stdout and stderr
}

// StartPostfix starts a private Postfix and waits for its 220 greeting; it
// fails the test without Postfix or root.
func StartPostfix(t testing.TB, opts PostfixOptions) *Postfix {
	t.Helper()
	postfixBin, uid, gid := requirePostfix(t, opts)
	p, dataDir := newInstanceDirs(t, uid, gid)
	sysMaster := p.configure(t, opts, postfixBin, dataDir, uid)
	becomeSubreaper()
	t.Cleanup(func() {
		for _, problem := range p.halt() {
			t.Errorf("mtatest: %s", problem)
		}
		if t.Failed() {
			t.Logf("mtatest: Postfix %s maillog (last lines):\n%s", p.addr, tail(p.Log(), 80))
		}
	})
	p.startOnFreePorts(t, opts, sysMaster)
	return p
}

// requirePostfix checks for Postfix, root and valid opts; it returns the
// postfix binary and the postfix user's uid and gid.
func requirePostfix(t testing.TB, opts PostfixOptions) (postfixBin string, uid, gid int) {
	t.Helper()
	postfixBin = lookCommand("postfix", "")
	if postfixBin == "" {
		t.Fatal("mtatest: the postfix binary was not found: install postfix: apt-get install postfix")
	}
	if _, err := os.Stat("/etc/postfix/master.cf"); err != nil {
		t.Fatalf("mtatest: %v: install postfix: apt-get install postfix", err)
	}
	if os.Geteuid() != 0 {
		t.Fatal("mtatest: a private Postfix needs root (the master, and postqueue/postsuper with -c DIR); run the tests as root")
	}
	owner, err := user.Lookup("postfix")
	if err != nil {
		t.Fatalf("mtatest: %v: install postfix: apt-get install postfix", err)
	}
	uid, _ = strconv.Atoi(owner.Uid)
	gid, _ = strconv.Atoi(owner.Gid)
	if err := validateService(opts.PolicyService); err != nil {
		t.Fatalf("mtatest: PolicyService: %v", err)
	}
	if err := validateService(opts.Milter); err != nil {
		t.Fatalf("mtatest: Milter: %v", err)
	}
	return postfixBin, uid, gid
}

// newInstanceDirs creates the instance's directories.
func newInstanceDirs(t testing.TB, uid, gid int) (*Postfix, string) {
	t.Helper()
	root, err := os.MkdirTemp("", "mtatest-")
	must(t, err)
	keep := os.Getenv("MTATEST_KEEP") != ""
	p := &Postfix{
		root:     root,
		confDir:  filepath.Join(root, "etc"),
		queueDir: filepath.Join(root, "queue"),
		logFile:  filepath.Join(root, "maillog"),
	}
	t.Cleanup(func() {
		if keep {
			t.Logf("mtatest: keeping Postfix directory %s", root)
			return
		}
		_ = os.RemoveAll(root)
	})
	dataDir := filepath.Join(root, "data")
	for _, d := range []string{root, p.confDir, p.queueDir} {
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.Chmod(d, 0o755))
	}
	must(t, os.Mkdir(dataDir, 0o700))
	if err := os.Chown(dataDir, uid, gid); err != nil {
		t.Fatalf("mtatest: chown data_directory to postfix: %v", err)
	}
	if err := checkSearchable(root); err != nil {
		t.Fatalf("mtatest: %v (the postfix user must be able to reach its data directory; try TMPDIR=/tmp)", err)
	}
	return p, dataDir
}

// configure writes main.cf and the queue directories; it returns the
// system's master.cf.
func (p *Postfix) configure(t testing.TB, opts PostfixOptions, postfixBin, dataDir string, uid int) string {
	t.Helper()
	mainCF, err := buildMainCF(opts, p.root, p.queueDir, dataDir, p.logFile)
	must(t, err)
	sysMaster, err := os.ReadFile("/etc/postfix/master.cf")
	must(t, err)
	must(t, p.writeConfig("main.cf", mainCF))
	must(t, p.writeConfig("master.cf", string(sysMaster)))

	postconf := lookCommand("postconf", filepath.Dir(postfixBin))
	out, err := exec.Command(postconf, "-c", p.confDir, "-h",
		"daemon_directory", "command_directory", "meta_directory", "setgid_group").Output()
	if err != nil {
		t.Fatalf("mtatest: postconf -c %s: %v", p.confDir, err)
	}
	dirs := strings.Fields(string(out))
	if len(dirs) != 4 {
		t.Fatalf("mtatest: postconf -h daemon_directory command_directory meta_directory setgid_group printed %q", out)
	}
	p.master = filepath.Join(dirs[0], "master")
	p.cmdDir = dirs[1]

	if err := createQueueDirs(dirs[2], p.queueDir, uid, dirs[3]); err != nil {
		t.Logf("mtatest: %v; running postfix check instead", err)
		if out, err := exec.Command(postfixBin, "-c", p.confDir, "check").CombinedOutput(); err != nil {
			t.Fatalf("mtatest: postfix -c %s check: %v\n%s\nmaillog:\n%s", p.confDir, err, out, p.Log())
		}
	}
	return string(sysMaster)
}

// startOnFreePorts starts the master on free ports, retrying with new ones
// when a port was taken meanwhile.
func (p *Postfix) startOnFreePorts(t testing.TB, opts PostfixOptions, sysMaster string) {
	t.Helper()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		ports := []int{FreePort(t)}
		p.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		reinjectPort := 0
		if opts.ReinjectPort {
			reinjectPort = FreePort(t)
			ports = append(ports, reinjectPort)
			p.ReinjectAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(reinjectPort))
		}
		masterCF, err := buildMasterCF(sysMaster, ports[0], reinjectPort)
		must(t, err)
		must(t, p.writeConfig("master.cf", masterCF))
		err = p.startMaster()
		if err == nil {
			return
		}
		problems := p.halt()
		busy := busyPorts(ports)
		if len(busy) > 0 && attempt < attempts {
			t.Logf("mtatest: Postfix did not start (%v), port %v taken meanwhile; retrying", err, busy)
			continue
		}
		t.Fatalf("mtatest: Postfix did not start: %v %s\n"+
			"(the master exits silently when it cannot bind a port or parse master.cf;\n"+
			"ports of ours in use now: %v; set MTATEST_KEEP=1 to keep %s)\nmaster output:\n%s\nmaillog:\n%s",
			err, strings.Join(problems, "; "), busy, p.confDir, p.output.String(), p.Log())
	}
}

// startMaster starts the master and waits for the greeting of every smtpd.
func (p *Postfix) startMaster() error {
	p.cmd = exec.Command(p.master, "-c", p.confDir, "-s")
	p.cmd.Stdout = &p.output
	p.cmd.Stderr = &p.output
	p.cmd.SysProcAttr = sysProcAttr()
	p.exited = make(chan struct{})
	if err := p.cmd.Start(); err != nil {
		p.cmd = nil
		return err
	}
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(p.cmd, p.exited)
	for _, a := range []string{p.addr, p.ReinjectAddr} {
		if a == "" {
			continue
		}
		if err := p.waitGreeting(a, 30*time.Second); err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
	}
	return nil
}

// busyPorts returns those of ports that cannot be bound on 127.0.0.1.
func busyPorts(ports []int) []int {
	var busy []int
	for _, port := range ports {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			busy = append(busy, port)
			continue
		}
		ln.Close()
	}
	return busy
}

// banner ends the instance's greeting: its directory's name.
func banner(root string) string { return filepath.Base(root) }

// waitGreeting polls addr until this instance's 220 greeting (ending with
// banner), or until the master exits because another holds the port.
func (p *Postfix) waitGreeting(addr string, timeout time.Duration) error {
	var err error
	if poll(timeout, func() bool {
		select {
		case <-p.exited:
			err = fmt.Errorf("master exited: %v", p.cmd.ProcessState)
			return true
		default:
		}
		conn, derr := net.DialTimeout("tcp", addr, time.Second)
		if err = derr; err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		line, rerr := bufio.NewReader(conn).ReadString('\n')
		if rerr != nil || !strings.HasPrefix(line, "220") || !strings.HasSuffix(strings.TrimRight(line, "\r\n"), " "+banner(p.root)) {
			err = fmt.Errorf("greeting %q: %v", line, rerr)
			return false
		}
		_, _ = conn.Write([]byte("QUIT\r\n"))
		return true
	}) {
		return err
	}
	return fmt.Errorf("timeout after %v: %v", timeout, err)
}

// halt sends the master SIGTERM and reaps its process group, SIGKILLing
// what is left; it returns the problems met, and does nothing once done.
func (p *Postfix) halt() []string {
	if p.cmd == nil {
		return nil
	}
	var problems []string
	pid := p.cmd.Process.Pid
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		problems = append(problems, fmt.Sprintf("Postfix master %d ignored SIGTERM for 10s; killed", pid))
	}
	if !reapGroup(pid, 5*time.Second) {
		problems = append(problems, fmt.Sprintf("Postfix processes of master %d (its process group) survived SIGKILL", pid))
	}
	if err := exec.Command(p.master, "-c", p.confDir, "-t").Run(); err != nil {
		problems = append(problems, fmt.Sprintf("master -t says Postfix in %s is still running: %v", p.confDir, err))
	}
	p.cmd = nil
	return problems
}

// Addr returns the address of the main smtpd, "127.0.0.1:PORT".
func (p *Postfix) Addr() string { return p.addr }

// ConfigDir returns the DIR of "postfix -c DIR".
func (p *Postfix) ConfigDir() string { return p.confDir }

// PrivateSocket returns the path of socket name in private/.
func (p *Postfix) PrivateSocket(name string) string {
	return filepath.Join(p.queueDir, "private", name)
}

// LogFile returns the path of the instance's maillog_file.
func (p *Postfix) LogFile() string { return p.logFile }

// Log returns the Postfix log so far (postlogd writes it a moment late).
func (p *Postfix) Log() string {
	b, _ := os.ReadFile(p.logFile)
	return string(b)
}

// WaitLog waits until the log contains substr and returns it; see WaitFor.
func (p *Postfix) WaitLog(t testing.TB, substr string, timeout time.Duration) string {
	t.Helper()
	var log string
	WaitFor(t, timeout, func() error {
		if log = p.Log(); !strings.Contains(log, substr) {
			return fmt.Errorf("Postfix log has no %q", substr)
		}
		return nil
	})
	return log
}

// WaitFor calls cond every 20 ms until it returns nil, failing the test
// with cond's last error after timeout.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	var err error
	if !poll(timeout, func() bool { err = cond(); return err == nil }) {
		t.Fatalf("mtatest: after %v: %v", timeout, err)
	}
}

// poll calls cond every 20 ms until it returns true (poll returns true) or
// timeout has passed (false).
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// FreePort returns a 127.0.0.1 TCP port free a moment ago, not handed out
// before, below the kernel's ephemeral range.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if freePorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		freePorts.given[port] = true
		return port
	}
	t.Fatalf("mtatest: no free port between 10000 and %d", low)
	return 0
}

// freePorts are the ports FreePort handed out in this process.
var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

// ephemeralLow is the low end of the ephemeral port range, at least 20000.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &low) // "LOW HIGH"; low stays if unparsable
	}
	return max(low, 20000)
}

// must fails the test if err is not nil.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("mtatest: %v", err)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// EximBinary returns $RATELIMITD_EXIM_DIR (default
// /opt/ratelimitd-test/exim)/usr/sbin/exim4; it fails the test without it.
func EximBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(cmp.Or(os.Getenv("RATELIMITD_EXIM_DIR"), "/opt/ratelimitd-test/exim"), "usr/sbin/exim4")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("mtatest: no Exim binary at %s: run scripts/deps.sh (make deps) as root", bin)
	}
	return bin
}

// MountTmpfs mounts a 1 MiB tmpfs at dir (created), unmounted at cleanup;
// it needs root.
func MountTmpfs(t testing.TB, dir string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o750))
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0750", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mtatest: mount a tmpfs (this test runs as root): %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("mtatest: umount %s: %v %s", dir, err, out)
		}
	})
}

// FillFileSystem writes dir/filler until the file system is full
// (ENOSPC) and returns its path.
func FillFileSystem(t testing.TB, dir string) string {
	t.Helper()
	filler, err := os.Create(filepath.Join(dir, "filler"))
	must(t, err)
	defer filler.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return filler.Name()
		}
	}
}
