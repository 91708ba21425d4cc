package mtatest

import (
	"bufio"
	"bytes"
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
	// SinkAddr ("127.0.0.1:PORT") becomes relayhost = [127.0.0.1]:PORT,
	// where all mail goes. Empty means defer_transports = smtp: accepted
	// mail stays in the queue (deferred).
	SinkAddr string

	// PolicyService ("inet:127.0.0.1:10031" or "unix:/abs/path"), when set,
	// is asked at RCPT (before permit_sasl_authenticated) and at
	// END-OF-MESSAGE, with default_action=DUNNO.
	PolicyService string
	// PolicyTimeout is the policy service's timeout; 0 means 10s.
	PolicyTimeout time.Duration

	// Milter ("inet:127.0.0.1:PORT" or "unix:/abs/path"), when set, becomes
	// smtpd_milters with milter_default_action = tempfail and
	// milter_protocol = 6.
	Milter string
	// MilterPrivate, when set (and Milter is not), names a unix socket in
	// the instance's private/ directory (Postfix.PrivateSocket), which
	// smtpd reaches as the postfix user.
	MilterPrivate string

	// ReinjectPort adds a second smtpd (Postfix.ReinjectAddr) with no
	// milter or policy service, open to mynetworks: the way back in for
	// thawed messages.
	ReinjectPort bool

	// ExtraMainCF sets main.cf parameters, replacing the harness's value
	// of the same name.
	ExtraMainCF map[string]string
	// ExtraMasterCF is appended to master.cf as is.
	ExtraMasterCF string
}

// Postfix is a running private Postfix instance. Its methods may be called
// from several goroutines. It is stopped and its directory removed at
// t.Cleanup (set MTATEST_KEEP=1 to keep the directory).
type Postfix struct {
	// ReinjectAddr is the address of the re-injection smtpd
	// ("127.0.0.1:PORT"), set if PostfixOptions.ReinjectPort was.
	ReinjectAddr string

	root     string // temporary directory holding everything below
	confDir  string // root/etc: main.cf, master.cf
	queueDir string // root/queue
	logFile  string // root/maillog
	addr     string // the smtp inet service
	master   string // path of the master binary
	cmdDir   string // command_directory

	cmd      *exec.Cmd
	exited   chan struct{} // closed when the master has exited
	output   lockedBuffer  // master's stdout and stderr
	stopOnce sync.Once
}

// StartPostfix starts a private Postfix and waits until its SMTP port
// answers with a 220 greeting. It fails the test (never skips it) when
// Postfix is not installed or the test does not run as root.
func StartPostfix(t testing.TB, opts PostfixOptions) *Postfix {
	t.Helper()
	postfixBin, uid, gid := requirePostfix(t, opts)
	p, dataDir := newInstanceDirs(t, uid, gid)
	sysMaster := p.configure(t, opts, postfixBin, dataDir, uid)
	becomeSubreaper()
	t.Cleanup(func() {
		p.Stop(t)
		if t.Failed() {
			t.Logf("mtatest: Postfix %s maillog (last lines):\n%s", p.addr, tail(p.Log(), 80))
		}
	})
	p.startOnFreePorts(t, opts, sysMaster)
	return p
}

// requirePostfix checks that Postfix is installed, that the test runs as
// root and that opts names valid services; it returns the postfix binary
// and the postfix user's uid and gid.
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

// newInstanceDirs creates the instance's directories (removed at
// t.Cleanup unless MTATEST_KEEP is set) and returns the instance and its
// data directory.
func newInstanceDirs(t testing.TB, uid, gid int) (*Postfix, string) {
	t.Helper()
	root, err := os.MkdirTemp("", "mtatest-")
	if err != nil {
		t.Fatalf("mtatest: %v", err)
	}
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
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("mtatest: %v", err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatalf("mtatest: %v", err)
		}
	}
	if err := os.Mkdir(dataDir, 0o700); err != nil {
		t.Fatalf("mtatest: %v", err)
	}
	if err := os.Chown(dataDir, uid, gid); err != nil {
		t.Fatalf("mtatest: chown data_directory to postfix: %v", err)
	}
	if err := checkSearchable(root); err != nil {
		t.Fatalf("mtatest: %v (the postfix user must be able to reach its data directory; try TMPDIR=/tmp)", err)
	}
	return p, dataDir
}

// configure writes main.cf (and the system's master.cf, given its ports
// at start), asks postconf for the daemon and command directories, and
// creates the queue directories. It returns the system's master.cf.
func (p *Postfix) configure(t testing.TB, opts PostfixOptions, postfixBin, dataDir string, uid int) string {
	t.Helper()
	mainCF, err := buildMainCF(opts, p.root, p.queueDir, dataDir, p.logFile)
	if err != nil {
		t.Fatalf("mtatest: %v", err)
	}
	sysMaster, err := os.ReadFile("/etc/postfix/master.cf")
	if err != nil {
		t.Fatalf("mtatest: %v", err)
	}
	// master.cf gets its ports below; postconf needs the file to exist.
	if err := p.writeConfig("main.cf", mainCF); err != nil {
		t.Fatalf("mtatest: %v", err)
	}
	if err := p.writeConfig("master.cf", string(sysMaster)); err != nil {
		t.Fatalf("mtatest: %v", err)
	}

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

	// The queue directories as postfix-files lists them: a millisecond,
	// where "postfix check" (the fallback) takes seconds.
	if err := createQueueDirs(dirs[2], p.queueDir, uid, dirs[3]); err != nil {
		t.Logf("mtatest: %v; running postfix check instead", err)
		if out, err := exec.Command(postfixBin, "-c", p.confDir, "check").CombinedOutput(); err != nil {
			t.Fatalf("mtatest: postfix -c %s check: %v\n%s\nmaillog:\n%s", p.confDir, err, out, p.Log())
		}
	}
	return string(sysMaster)
}

// startOnFreePorts writes master.cf with free ports and starts the
// master, again with new ports while a master exits silently because a
// port was taken meanwhile.
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
		masterCF, err := buildMasterCF(sysMaster, ports[0], reinjectPort, opts.ExtraMasterCF)
		if err != nil {
			t.Fatalf("mtatest: %v", err)
		}
		if err := p.writeConfig("master.cf", masterCF); err != nil {
			t.Fatalf("mtatest: %v", err)
		}
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
			"(the master exits silently when it cannot bind a port, e.g. one in ExtraMasterCF, or parse master.cf;\n"+
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

// banner is the word the greeting of the instance in directory root ends
// with: the directory's name, unique among the instances running.
func banner(root string) string { return filepath.Base(root) }

// waitGreeting polls addr until this instance's smtpd sends its 220
// greeting (one that ends with banner). When another Postfix holds the
// port, it waits for this master to exit, so the caller retries with
// other ports.
func (p *Postfix) waitGreeting(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("master exited: %v", p.cmd.ProcessState)
		default:
		}
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			if rerr == nil && strings.HasPrefix(line, "220") && strings.HasSuffix(strings.TrimRight(line, "\r\n"), " "+banner(p.root)) {
				_, _ = conn.Write([]byte("QUIT\r\n"))
				_ = conn.Close()
				return nil
			}
			_ = conn.Close()
			err = fmt.Errorf("greeting %q: %v", line, rerr)
		}
		lastErr = err
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("timeout after %v: %v", timeout, lastErr)
}

// Stop sends the master SIGTERM (as "postfix stop" does) and reaps its
// process group, killing what is left after a few seconds. It runs at
// t.Cleanup; an earlier call is fine and later calls do nothing.
func (p *Postfix) Stop(t testing.TB) {
	t.Helper()
	p.stopOnce.Do(func() {
		for _, problem := range p.halt() {
			t.Errorf("mtatest: %s", problem)
		}
	})
}

// halt stops the current master, if any, and its daemons, and returns what
// went wrong.
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
	// The master is a process group leader; its daemons are in its group
	// and outlive it briefly.
	if left := reapGroup(pid, 5*time.Second); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("Postfix processes %v of master %d survived SIGKILL", left, pid))
	}
	if err := exec.Command(p.master, "-c", p.confDir, "-t").Run(); err != nil {
		problems = append(problems, fmt.Sprintf("master -t says Postfix in %s is still running: %v", p.confDir, err))
	}
	p.cmd = nil
	return problems
}

// Addr returns the address of the main smtpd, "127.0.0.1:PORT".
func (p *Postfix) Addr() string { return p.addr }

// Dir returns the temporary directory holding the whole instance: etc/
// (ConfigDir), queue/ (QueueDir), data/ and maillog (LogFile).
func (p *Postfix) Dir() string { return p.root }

// ConfigDir returns the instance's configuration directory, the DIR in
// "postfix -c DIR".
func (p *Postfix) ConfigDir() string { return p.confDir }

// PrivateSocket returns the path of the socket name in the instance's
// private/ directory (see PostfixOptions.MilterPrivate).
func (p *Postfix) PrivateSocket(name string) string {
	return filepath.Join(p.queueDir, "private", name)
}

// QueueDir returns the instance's queue_directory.
func (p *Postfix) QueueDir() string { return p.queueDir }

// LogFile returns the path of the instance's maillog_file.
func (p *Postfix) LogFile() string { return p.logFile }

// Log returns the Postfix log so far; lines arrive through postlogd, a
// moment after the event.
func (p *Postfix) Log() string {
	b, _ := os.ReadFile(p.logFile)
	return string(b)
}

// WaitLog polls the log until it contains substr and returns the log; it
// fails the test if that does not happen within timeout.
func (p *Postfix) WaitLog(t testing.TB, substr string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		log := p.Log()
		if strings.Contains(log, substr) {
			return log
		}
		if time.Now().After(deadline) {
			t.Fatalf("mtatest: Postfix log has no %q after %v", substr, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that this process has not handed out before, picked at random below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), where outgoing
// connections of parallel tests cannot take it.
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

// ephemeralLow is the low end of the kernel's ephemeral port range
// (32768 by default), at least 20000.
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	return max(low, 20000)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
