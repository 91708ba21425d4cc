package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// child is a server process this program started: the floor or the
// daemon. It is stopped (SIGTERM, then SIGKILL) when the program ends,
// and on Linux also if the program dies (parent-death signal).
type child struct {
	name string
	cmd  *exec.Cmd
	addr string // TCP host:port
	// unixAddr is "unix:PATH" when the server listens on a unix socket
	// too, else "".
	unixAddr string
	logPath  string
	stdin    io.Closer     // closed by stop, if set
	done     chan struct{} // closed when the process has exited
	err      error         // Wait's result, once done is closed
}

// startChild starts cmd, restricted to cpus unless that is nil (--pin),
// and watches for its exit.
func startChild(name string, cmd *exec.Cmd, logPath string, cpus []int) (*child, error) {
	setParentDeathSignal(cmd)
	if err := startOn(cmd, cpus); err != nil {
		if cmd.Process != nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace for the process to exit, then
// kills it. It returns how long the process took to exit, and Wait's error
// unless the process exited because of the signal.
func (c *child) stop(grace time.Duration) (time.Duration, error) {
	start := time.Now()
	if c.exited() {
		return 0, c.err
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	if c.stdin != nil {
		c.stdin.Close()
	}
	select {
	case <-c.done:
		return time.Since(start), c.err
	case <-time.After(grace):
	}
	c.cmd.Process.Kill()
	<-c.done
	return time.Since(start), fmt.Errorf("%s did not stop within %s; killed", c.name, grace)
}

// logTail returns the end of the child's log, for error messages.
func (c *child) logTail() string {
	b, err := os.ReadFile(c.logPath)
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\n--- " + c.logPath + " (end) ---\n" + string(b)
}

// freeLoopbackAddr returns a 127.0.0.1 address with a port that was free a
// moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening polls addr until it accepts a connection, c exits, ctx
// ends or timeout passes.
func waitListening(ctx context.Context, c *child, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if c.exited() {
			return fmt.Errorf("%s exited: %v%s", c.name, c.err, c.logTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %s%s", c.name, addr, timeout, c.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// memStatus is a process's memory from /proc/PID/status, in bytes.
type memStatus struct {
	RSS, HWM, Anon, File int64
}

// readMem reads /proc/PID/status (Linux); ok is false elsewhere or when
// the process is gone.
func readMem(pid int) (m memStatus, ok bool) {
	if pid <= 0 {
		return m, false
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return m, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, found := strings.Cut(sc.Text(), ":")
		if !found {
			continue
		}
		var dst *int64
		switch name {
		case "VmRSS":
			dst = &m.RSS
		case "VmHWM":
			dst = &m.HWM
		case "RssAnon":
			dst = &m.Anon
		case "RssFile":
			dst = &m.File
		default:
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		if err == nil {
			*dst = kb << 10
			ok = true
		}
	}
	return m, ok
}

// tickDuration is the clock tick of /proc/PID/stat's CPU times: USER_HZ,
// 100 on every Linux architecture Go supports.
const tickDuration = 10 * time.Millisecond

// cpuTicks returns the user+system CPU time of a process in clock ticks,
// from /proc/PID/stat (Linux).
func cpuTicks(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// After the command: state(0) ... utime(11) stime(12).
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return u + s, true
}

// waitSettled waits until the daemon has flushed what it was sent: its
// database file unchanged (size and modification time) and its CPU time
// almost unchanged (at most one tick per second) for quiet, bounded by
// limit; with dbPath "" only the CPU time is watched. It returns how long
// it waited.
func waitSettled(ctx context.Context, pid int, dbPath string, quiet, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	type sample struct {
		size  int64
		mtime time.Time
		ticks int64
	}
	take := func() sample {
		var s sample
		if fi, err := os.Stat(dbPath); err == nil {
			s.size, s.mtime = fi.Size(), fi.ModTime()
		}
		s.ticks, _ = cpuTicks(pid)
		return s
	}
	const step = 250 * time.Millisecond
	base, since := take(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(step):
		}
		s := take()
		quietFor := time.Since(since)
		allowed := int64(quietFor/time.Second) + 1
		if s.size != base.size || !s.mtime.Equal(base.mtime) || s.ticks-base.ticks > allowed {
			base, since = s, time.Now()
		} else if quietFor >= quiet {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return time.Since(start), fmt.Errorf("daemon still busy after %s", limit)
		}
	}
}

// daemonStatus asks the daemon at socket (admin API) for the rate states
// it tracks and the requests it has answered.
func daemonStatus(ctx context.Context, socket string) (trackedKeys, requests int64, err error) {
	st, err := daemonStatusOf(ctx, socket)
	return st.TrackedKeys, st.Requests, err
}

// statusFields are the fields of the daemon's status the program reads.
type statusFields struct {
	TrackedKeys int64 `json:"tracked_keys"`
	Requests    int64 `json:"requests"`
	Store       *struct {
		LocalDecisions map[string]int64 `json:"local_decisions"`
	} `json:"store"`
}

// localDecisions sums the requests the Redis backend decided locally
// (past redis_timeout, or while degraded), over every reason.
func (st statusFields) localDecisions() int64 {
	var n int64
	if st.Store != nil {
		for _, v := range st.Store.LocalDecisions {
			n += v
		}
	}
	return n
}

// daemonStatusOf reads the daemon's status on its admin socket.
func daemonStatusOf(ctx context.Context, socket string) (statusFields, error) {
	var st statusFields
	hc := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://ratelimitd/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, errors.New(resp.Status)
	}
	err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
	return st, err
}
