package mtatest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
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
	// is asked at RCPT (first in smtpd_recipient_restrictions, before
	// permit_sasl_authenticated, so authenticated senders are limited too)
	// and at END-OF-MESSAGE (smtpd_end_of_data_restrictions), with
	// default_action=DUNNO and a timeout of PolicyTimeout.
	PolicyService string
	// PolicyTimeout is the policy service's timeout; 0 means 10s.
	PolicyTimeout time.Duration

	// Milter ("inet:127.0.0.1:PORT" or "unix:/abs/path"), when set, becomes
	// smtpd_milters with milter_default_action = tempfail and
	// milter_protocol = 6.
	Milter string

	// ReinjectPort adds a second smtpd on another free port, with no
	// milter, no policy service and smtpd_recipient_restrictions =
	// permit_mynetworks, reject: the way back into Postfix for thawed
	// messages. Its address is in Postfix.ReinjectAddr.
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
	postfixBin := lookCommand("postfix", "")
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
	uid, _ := strconv.Atoi(owner.Uid)
	gid, _ := strconv.Atoi(owner.Gid)
	if err := validateService(opts.PolicyService); err != nil {
		t.Fatalf("mtatest: PolicyService: %v", err)
	}
	if err := validateService(opts.Milter); err != nil {
		t.Fatalf("mtatest: Milter: %v", err)
	}

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

	mainCF, err := buildMainCF(opts, root, p.queueDir, dataDir, p.logFile)
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

	// The queue directories with the owners and modes of postfix-files,
	// as "postfix check" (post-install create-missing) would create them,
	// in a millisecond instead of seconds of postconf runs. Should that
	// file be unusable, "postfix check" does it.
	if err := createQueueDirs(dirs[2], p.queueDir, uid, dirs[3]); err != nil {
		t.Logf("mtatest: %v; running postfix check instead", err)
		if out, err := exec.Command(postfixBin, "-c", p.confDir, "check").CombinedOutput(); err != nil {
			t.Fatalf("mtatest: postfix -c %s check: %v\n%s\nmaillog:\n%s", p.confDir, err, out, p.Log())
		}
	}

	becomeSubreaper()
	t.Cleanup(func() {
		p.Stop(t)
		if t.Failed() {
			t.Logf("mtatest: Postfix %s maillog (last lines):\n%s", p.addr, tail(p.Log(), 80))
		}
	})
	// A port picked free can be taken by someone else before the master
	// binds it; the master then exits without a word (its stderr is
	// /dev/null and postlogd is not up yet), so try again with new ports.
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
		masterCF, err := buildMasterCF(string(sysMaster), ports[0], reinjectPort, opts.ExtraMasterCF)
		if err != nil {
			t.Fatalf("mtatest: %v", err)
		}
		if err := p.writeConfig("master.cf", masterCF); err != nil {
			t.Fatalf("mtatest: %v", err)
		}
		err = p.startMaster()
		if err == nil {
			return p
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

// writeConfig writes a file into the configuration directory, backdated:
// Postfix will not read a main.cf modified within the last second or so (it
// might be half-written) and polls every 300 ms until the file is old
// enough, which would cost ~2 s per command.
func (p *Postfix) writeConfig(name, content string) error {
	path := filepath.Join(p.confDir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		return err
	}
	old := time.Now().Add(-time.Minute)
	return os.Chtimes(path, old, old)
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
// greeting there (one that ends with banner). A greeting without it comes
// from another Postfix holding the port (picked free, then taken by a test
// running in parallel before this master could bind it), and this master
// exits for want of the port: waitGreeting waits for that, so that the
// caller retries with other ports instead of testing the other instance.
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

// Stop stops the instance the way "postfix stop" does (SIGTERM to the
// master), waits for the master and every daemon of its process group to
// exit, killing them if they take more than a few seconds, and reaps them.
// It is called at t.Cleanup; calling it earlier (to test an MTA that went
// away) is fine, and further calls do nothing.
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

// QueueDir returns the instance's queue_directory.
func (p *Postfix) QueueDir() string { return p.queueDir }

// LogFile returns the path of the instance's maillog_file.
func (p *Postfix) LogFile() string { return p.logFile }

// Log returns the whole Postfix log so far ("" before the first line).
// Log lines reach the file through postlogd, a moment after the event.
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

// Command returns an *exec.Cmd running the Postfix command name (postsuper,
// postqueue, postcat, postconf, postfix, postmap, sendmail, ...) against
// this instance, i.e. with "-c DIR" ("-C DIR" for sendmail) before args.
// Its Args are what production code configured with these commands would
// run.
func (p *Postfix) Command(name string, args ...string) *exec.Cmd {
	path := name
	if !strings.Contains(name, "/") {
		path = lookCommand(name, p.cmdDir)
		if path == "" {
			path = filepath.Join(p.cmdDir, name)
		}
	}
	flag := "-c"
	if filepath.Base(name) == "sendmail" {
		flag = "-C"
	}
	return exec.Command(path, append([]string{flag, p.confDir}, args...)...)
}

// run runs a Postfix command and fails the test if it fails.
func (p *Postfix) run(t testing.TB, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := p.Command(name, args...)
	var o, e bytes.Buffer
	cmd.Stdout = &o
	cmd.Stderr = &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("mtatest: %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd.Args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// QueueEntry is one message in the queue, as "postqueue -j" prints it.
type QueueEntry struct {
	QueueName   string `json:"queue_name"` // incoming, active, deferred, hold, maildrop
	QueueID     string `json:"queue_id"`
	ArrivalTime int64  `json:"arrival_time"` // Unix seconds
	MessageSize int64  `json:"message_size"`
	Sender      string `json:"sender"`
	Recipients  []struct {
		Address     string `json:"address"`
		DelayReason string `json:"delay_reason,omitempty"`
	} `json:"recipients"`
}

// Queue lists the queue with "postqueue -c DIR -j" (the JSON form of
// "postqueue -p", where held messages have "!" after their ID).
func (p *Postfix) Queue(t testing.TB) []QueueEntry {
	t.Helper()
	out, _ := p.run(t, "postqueue", "-j")
	var entries []QueueEntry
	for _, line := range strings.Split(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var e QueueEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("mtatest: postqueue -j line %q: %v", line, err)
		}
		entries = append(entries, e)
	}
	return entries
}

// QueueIDs returns the IDs of all queued messages and, separately, of those
// in the hold queue.
func (p *Postfix) QueueIDs(t testing.TB) (all, held []string) {
	t.Helper()
	for _, e := range p.Queue(t) {
		all = append(all, e.QueueID)
		if e.QueueName == "hold" {
			held = append(held, e.QueueID)
		}
	}
	return all, held
}

// WaitQueue polls QueueIDs until done returns true and returns what it saw
// last; it fails the test if that does not happen within timeout.
func (p *Postfix) WaitQueue(t testing.TB, timeout time.Duration, done func(all, held []string) bool) (all, held []string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		all, held = p.QueueIDs(t)
		if done(all, held) {
			return all, held
		}
		if time.Now().After(deadline) {
			t.Fatalf("mtatest: Postfix queue not as wanted after %v: all %v, held %v", timeout, all, held)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// WaitQueueEmpty waits until the queue is empty; see WaitQueue.
func (p *Postfix) WaitQueueEmpty(t testing.TB, timeout time.Duration) {
	t.Helper()
	p.WaitQueue(t, timeout, func(all, _ []string) bool { return len(all) == 0 })
}

// Release releases a held message with "postsuper -H ID"; it moves to the
// deferred queue, and the next queue run (within about a second) delivers
// it. It fails the test unless exactly one message was released.
func (p *Postfix) Release(t testing.TB, id string) {
	t.Helper()
	_, stderr := p.run(t, "postsuper", "-H", id)
	if !strings.Contains(stderr, "Released from hold: 1 message") {
		t.Fatalf("mtatest: postsuper -H %s released nothing: %s", id, stderr)
	}
}

// Delete deletes a queued message with "postsuper -d ID"; it fails the test
// unless exactly one message was deleted.
func (p *Postfix) Delete(t testing.TB, id string) {
	t.Helper()
	_, stderr := p.run(t, "postsuper", "-d", id)
	if !strings.Contains(stderr, "Deleted: 1 message") {
		t.Fatalf("mtatest: postsuper -d %s deleted nothing: %s", id, stderr)
	}
}

// Flush asks for delivery of all deferred mail now ("postqueue -f").
func (p *Postfix) Flush(t testing.TB) {
	t.Helper()
	p.run(t, "postqueue", "-f")
}

// Cat returns "postcat -q ID": the queue file's envelope, header and body.
func (p *Postfix) Cat(t testing.TB, id string) string {
	t.Helper()
	out, _ := p.run(t, "postcat", "-q", id)
	return out
}

// createQueueDirs creates the $queue_directory entries of type d listed in
// metaDir/postfix-files, with their owner ($mail_owner or root), group
// ($setgid_group or unchanged) and mode.
func createQueueDirs(metaDir, queueDir string, mailOwner int, setgidGroup string) error {
	spec, err := os.ReadFile(filepath.Join(metaDir, "postfix-files"))
	if err != nil {
		return err
	}
	grp, err := user.LookupGroup(setgidGroup)
	if err != nil {
		return err
	}
	setgidGID, err := strconv.Atoi(grp.Gid)
	if err != nil {
		return err
	}
	made := 0
	for _, line := range strings.Split(string(spec), "\n") {
		// path:type:owner:group:mode:flags
		f := strings.Split(line, ":")
		if len(f) < 5 || f[1] != "d" || !strings.HasPrefix(f[0], "$queue_directory/") {
			continue
		}
		dir := filepath.Join(queueDir, strings.TrimPrefix(f[0], "$queue_directory/"))
		mode, err := strconv.ParseUint(f[4], 8, 32)
		if err != nil {
			return fmt.Errorf("postfix-files: %q: %w", line, err)
		}
		uid, gid := 0, -1
		switch f[2] {
		case "root":
		case "$mail_owner":
			uid = mailOwner
		default:
			return fmt.Errorf("postfix-files: %q: unknown owner", line)
		}
		switch f[3] {
		case "-":
		case "$setgid_group":
			gid = setgidGID
		default:
			return fmt.Errorf("postfix-files: %q: unknown group", line)
		}
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
		if err := os.Chmod(dir, os.FileMode(mode)); err != nil {
			return err
		}
		made++
	}
	if made == 0 {
		return errors.New("postfix-files lists no queue directories")
	}
	return nil
}

// buildMainCF returns the instance's main.cf.
func buildMainCF(opts PostfixOptions, root, queueDir, dataDir, logFile string) (string, error) {
	type kv struct{ k, v string }
	params := []kv{
		{"compatibility_level", "3.6"},
		{"queue_directory", queueDir},
		{"data_directory", dataDir},
		{"maillog_file", logFile},
		{"maillog_file_prefixes", root},
		// The greeting names the instance (banner), so that waitGreeting
		// knows its own master from another that holds the port.
		{"smtpd_banner", "$myhostname ESMTP Postfix " + banner(root)},
		{"myhostname", "mtatest.localdomain"},
		{"mydomain", "localdomain"},
		{"myorigin", "$myhostname"},
		{"mydestination", ""},
		{"local_recipient_maps", ""},
		{"alias_maps", ""},
		{"alias_database", ""},
		{"inet_interfaces", "127.0.0.1"},
		{"inet_protocols", "ipv4"},
		{"mynetworks", "127.0.0.0/8"},
		{"biff", "no"},
		{"append_dot_mydomain", "no"},
		{"readme_directory", "no"},
		// Fast relay to the sink and fast retries.
		{"smtp_dns_support_level", "disabled"},
		{"smtpd_peername_lookup", "no"},
		{"smtp_connect_timeout", "2s"},
		{"smtp_helo_timeout", "10s"},
		{"queue_run_delay", "1s"},
		{"minimal_backoff_time", "1s"},
		{"maximal_backoff_time", "2s"},
		{"in_flow_delay", "0"},
		// No tarpitting of a test client that gets 4xx replies.
		{"smtpd_error_sleep_time", "0"},
		{"smtpd_soft_error_limit", "1000"},
		{"smtpd_hard_error_limit", "1000"},
		{"smtpd_junk_command_limit", "1000"},
		// XCLIENT LOGIN= makes a SASL-authenticated session.
		{"smtpd_authorized_xclient_hosts", "127.0.0.0/8"},
		{"smtpd_sasl_auth_enable", "yes"},
		{"smtpd_relay_restrictions", "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"},
	}
	if opts.SinkAddr != "" {
		host, port, err := net.SplitHostPort(opts.SinkAddr)
		if err != nil {
			return "", fmt.Errorf("SinkAddr %q: %w", opts.SinkAddr, err)
		}
		params = append(params, kv{"relayhost", "[" + host + "]:" + port})
	} else {
		// Deliveries wait for "postqueue -f", which fails without DNS.
		params = append(params, kv{"relayhost", ""}, kv{"defer_transports", "smtp"})
	}
	rcpt := "permit_mynetworks, permit_sasl_authenticated, reject_unauth_destination"
	eod := ""
	if opts.PolicyService != "" {
		timeout := opts.PolicyTimeout
		if timeout <= 0 {
			timeout = 10 * time.Second
		}
		policy := fmt.Sprintf("check_policy_service { %s, timeout=%ds, default_action=DUNNO }",
			opts.PolicyService, int((timeout+time.Second-1)/time.Second))
		rcpt = policy + ", " + rcpt
		eod = policy
	}
	params = append(params,
		kv{"smtpd_recipient_restrictions", rcpt},
		kv{"smtpd_end_of_data_restrictions", eod})
	if opts.Milter != "" {
		params = append(params,
			kv{"smtpd_milters", opts.Milter},
			kv{"milter_default_action", "tempfail"},
			kv{"milter_protocol", "6"})
	}

	extra := make([]string, 0, len(opts.ExtraMainCF))
	for k := range opts.ExtraMainCF {
		extra = append(extra, k)
	}
	sort.Strings(extra)
	for _, k := range extra {
		if k == "" || strings.ContainsAny(k, " \t\n=") {
			return "", fmt.Errorf("ExtraMainCF: bad parameter name %q", k)
		}
		if k == "smtpd_banner" {
			return "", errors.New("ExtraMainCF: smtpd_banner is the harness's (it names the instance)")
		}
		v := opts.ExtraMainCF[k]
		if strings.ContainsAny(v, "\r\n") {
			return "", fmt.Errorf("ExtraMainCF: %s: value has a line break", k)
		}
		replaced := false
		for i := range params {
			if params[i].k == k {
				params[i].v, replaced = v, true
			}
		}
		if !replaced {
			params = append(params, kv{k, v})
		}
	}

	var b strings.Builder
	b.WriteString("# Written by ratelimitd internal/mtatest for one test; see its package doc.\n")
	for _, p := range params {
		fmt.Fprintf(&b, "%s = %s\n", p.k, p.v)
	}
	return b.String(), nil
}

// buildMasterCF turns the system master.cf into the instance's: the "smtp
// inet" service listens on 127.0.0.1:smtpPort, every other inet service is
// commented out, every chroot column is "n", and the re-injection smtpd and
// extra are appended.
func buildMasterCF(sys string, smtpPort, reinjectPort int, extra string) (string, error) {
	var b strings.Builder
	b.WriteString("# Written by ratelimitd internal/mtatest from /etc/postfix/master.cf.\n")
	dropping, haveSMTP := false, false
	for _, line := range strings.SplitAfter(sys, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "" || strings.HasPrefix(trimmed, "#"):
			b.WriteString(line)
			continue
		case line[0] == ' ' || line[0] == '\t':
			// Continuation of the previous entry.
			if dropping {
				b.WriteString("#mtatest# " + line)
			} else {
				b.WriteString(line)
			}
			continue
		}
		f := strings.Fields(line)
		if len(f) < 8 {
			dropping = false
			b.WriteString(line)
			continue
		}
		if f[1] == "inet" {
			if f[0] == "smtp" && !haveSMTP {
				f[0] = "127.0.0.1:" + strconv.Itoa(smtpPort)
				haveSMTP = true
			} else {
				dropping = true
				b.WriteString("#mtatest# " + line)
				continue
			}
		}
		dropping = false
		f[4] = "n" // chroot
		b.WriteString(strings.Join(f, " ") + "\n")
	}
	if !haveSMTP {
		return "", errors.New(`/etc/postfix/master.cf has no "smtp inet" service`)
	}
	if reinjectPort != 0 {
		fmt.Fprintf(&b, "127.0.0.1:%d inet n - n - - smtpd\n", reinjectPort)
		b.WriteString("  -o syslog_name=postfix/reinject\n")
		b.WriteString("  -o smtpd_milters=\n")
		b.WriteString("  -o smtpd_client_restrictions=\n")
		b.WriteString("  -o smtpd_helo_restrictions=\n")
		b.WriteString("  -o smtpd_sender_restrictions=\n")
		b.WriteString("  -o smtpd_relay_restrictions=permit_mynetworks,reject\n")
		b.WriteString("  -o smtpd_recipient_restrictions=permit_mynetworks,reject\n")
		b.WriteString("  -o smtpd_data_restrictions=\n")
		b.WriteString("  -o smtpd_end_of_data_restrictions=\n")
	}
	if extra != "" {
		b.WriteString(extra)
		if !strings.HasSuffix(extra, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String(), nil
}

// validateService checks a policy or milter endpoint for what would break
// the main.cf syntax.
func validateService(s string) error {
	if s == "" {
		return nil
	}
	if strings.ContainsAny(s, " \t\r\n,{}") {
		return fmt.Errorf("%q: must not contain spaces, commas or braces", s)
	}
	if !strings.HasPrefix(s, "inet:") && !strings.HasPrefix(s, "unix:") {
		return fmt.Errorf(`%q: want "inet:HOST:PORT" or "unix:/PATH"`, s)
	}
	return nil
}

// lookCommand finds a Postfix command in PATH, then in dir and the usual
// sbin directories (PATH may lack them for non-login shells).
func lookCommand(name, dir string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, d := range []string{dir, "/usr/sbin", "/usr/local/sbin", "/sbin"} {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// checkSearchable fails if dir or one of its ancestors is not searchable by
// other users (the postfix user needs to reach its data directory).
func checkSearchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (mode %v) is not searchable by other users", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago
// (another process may take it before the caller binds it).
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("mtatest: find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
