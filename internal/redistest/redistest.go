// Package redistest runs real Redis servers in Go tests (standalone,
// Sentinels, Cluster) on free 127.0.0.1 ports, stopped at t.Cleanup. A
// missing binary (Debian's redis-server, redis-sentinel, redis-tools)
// fails the test.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// Server is one running redis-server (or Sentinel) process.
type Server struct {
	// Addr is "127.0.0.1:PORT", Port its port.
	Addr string
	Port int
	cmd  *exec.Cmd
	args []string // the binary and its arguments
	t    testing.TB
}

func binary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("redistest: %s not found (run scripts/deps.sh): %v", name, err)
	}
	return p
}

// serverDir returns a directory for one server's files, removed at
// cleanup: on tmpfs (/dev/shm) where there is one, since a Cluster node
// fsyncs nodes.conf in its main thread at every slot change (a reshard of
// 3,000 slots makes thousands), and on a shared virtual disk one slow
// fsync stalls the master past the tests' redis_timeout.
func serverDir(t testing.TB) string {
	if dir, err := os.MkdirTemp("/dev/shm", "redistest-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return t.TempDir()
}

// start runs bin (as a Sentinel if sentinel) on port with configuration
// lines conf, and waits until it answers PING.
func start(t testing.TB, bin string, sentinel bool, port int, conf ...string) *Server {
	t.Helper()
	dir := serverDir(t)
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, t: t}
	lines := []string{
		"bind 127.0.0.1",
		"port " + strconv.Itoa(port),
		"dir " + dir,
		"logfile " + filepath.Join(dir, "log"),
		"daemonize no",
		"protected-mode no",
	}
	if !sentinel {
		lines = append(lines, `save ""`, "appendonly no")
	}
	lines = append(lines, conf...)
	cf := filepath.Join(dir, "redis.conf")
	if err := os.WriteFile(cf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.args = []string{bin, cf}
	if sentinel {
		s.args = append(s.args, "--sentinel")
	}
	s.run()
	t.Cleanup(func() {
		s.Kill()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "log")); err == nil {
				t.Logf("redistest: tail of %s log:\n%s", s.Addr, b[max(0, len(b)-3000):])
			}
		}
	})
	s.waitPing()
	return s
}

func (s *Server) run() {
	s.t.Helper()
	s.cmd = exec.Command(s.args[0], s.args[1:]...)
	s.cmd.SysProcAttr = procAttr()
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", s.args[0], err)
	}
}

// waitPing waits until the server answers PING (10s at most).
func (s *Server) waitPing() {
	s.t.Helper()
	mtatest.WaitFor(s.t, 10*time.Second, func() error {
		if _, err := s.Do("PING"); err != nil {
			return fmt.Errorf("redistest: %s on %s does not answer: %w", s.args[0], s.Addr, err)
		}
		return nil
	})
}

// Restart starts a killed server again on its port and directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.run()
	s.waitPing()
}

// StartOn runs a standalone redis-server on port.
func StartOn(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	return start(t, binary(t, "redis-server"), false, port, extra...)
}

// Start runs a standalone redis-server with extra configuration lines.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartOn(t, mtatest.FreePort(t), extra...)
}

// Do sends one RESP command (2 s deadline) and returns the reply as text,
// an array one element a line; an error reply is an error.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write(b); err != nil {
		return "", err
	}
	var out []string
	if err := readReply(bufio.NewReader(c), &out); err != nil {
		return "", err
	}
	return strings.Join(out, "\n"), nil
}

func readReply(r *bufio.Reader, out *[]string) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return fmt.Errorf("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		*out = append(*out, line[1:])
	case '-':
		return fmt.Errorf("redistest: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			*out = append(*out, "")
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		*out = append(*out, string(buf[:n]))
	case '*':
		n, _ := strconv.Atoi(line[1:])
		for range max(n, 0) {
			if err := readReply(r, out); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("redistest: unexpected reply %q", line)
	}
	return nil
}

// Must is Do that fails the test on error.
func (s *Server) Must(args ...string) string {
	s.t.Helper()
	v, err := s.Do(args...)
	if err != nil {
		s.t.Fatalf("redistest: %s %v: %v", s.Addr, args, err)
	}
	return v
}

// Kill ends the server with SIGKILL and waits; idempotent.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGCONT)
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// Stop pauses the server with SIGSTOP, as a hung host; Resume undoes it.
func (s *Server) Stop() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a server paused by Stop.
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// Info returns field of INFO section ("used_memory" in "memory").
func (s *Server) Info(section, field string) string {
	s.t.Helper()
	for _, l := range strings.Split(s.Must("INFO", section), "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}
