package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// activatedServe starts `ratelimitd serve --config cfgPath` as systemd's
// socket activation does (sd_listen_fds(3)): the listeners' descriptors
// from 3 on, LISTEN_FDS, LISTEN_FDNAMES and LISTEN_PID, the daemon's own
// process ID (a shell sets it, then execs the daemon).
func activatedServe(t *testing.T, cfgPath string, names []string, ls ...net.Listener) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" -test.run='^$'`, os.Args[0])
	for _, l := range ls {
		f, err := l.(interface{ File() (*os.File, error) }).File()
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfgPath,
		fmt.Sprintf("LISTEN_FDS=%d", len(ls)), "LISTEN_FDNAMES="+strings.Join(names, ":"))
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, out
}

// TestServeSocketActivation runs the real binary with a unix and a TCP
// listening socket passed the systemd way: the daemon serves on both as
// the listeners configured with their addresses, leaves the unix socket's
// mode as its creator set it (not socket_mode), and leaves the socket
// file in place at exit, for the next start.
func TestServeSocketActivation(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "ratelimitd")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ul.(*net.UnixListener).SetUnlinkOnClose(false)
	defer ul.Close()
	if err := os.Chmod(sock, 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Lstat(sock)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	cfgPath := writeConfig(t, dir, "unix:"+sock, "")
	text, _ := os.ReadFile(cfgPath)
	text = []byte(strings.Replace(string(text), fmt.Sprintf("policy_listen = [%q]", "unix:"+sock),
		fmt.Sprintf("policy_listen = [%q, %q]", "unix:"+sock, tl.Addr().String()), 1))
	os.WriteFile(cfgPath, text, 0o644)

	cmd, out := activatedServe(t, cfgPath, []string{"ratelimitd.socket", "ratelimitd-tcp.socket"}, ul, tl)
	ul.Close()
	tl.Close()
	waitLog(t, out, "ratelimitd started")
	for _, want := range []string{"policy unix:" + sock + " (from systemd)", "policy " + tl.Addr().String() + " (from systemd)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("start log lacks %q:\n%s", want, out.String())
		}
	}
	if got := policyQuery(t, "unix:"+sock, "una", "RCPT"); got != "action=DUNNO" {
		t.Fatalf("over the passed unix socket: %s", got)
	}
	if got := policyQuery(t, tl.Addr().String(), "tom", "RCPT"); got != "action=DUNNO" {
		t.Fatalf("over the passed TCP socket: %s", got)
	}
	after, err := os.Lstat(sock)
	if err != nil || !os.SameFile(before, after) || after.Mode().Perm() != 0o600 {
		t.Fatalf("the passed socket was replaced or changed: %v %v", after, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, out.String())
	}
	if st, err := os.Lstat(sock); err != nil || !os.SameFile(before, st) {
		t.Fatalf("the daemon removed systemd's socket at exit: %v", err)
	}
}

// TestServeRefusesUnnamedPassedSocket checks that a socket passed by
// systemd that no configured listener names stops the start with an error
// naming it: its clients would wait on it for nothing.
func TestServeRefusesUnnamedPassedSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "forgotten")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
	cmd, out := activatedServe(t, cfgPath, []string{"ratelimitd.socket"}, ul)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("serve started with an unnamed passed socket:\n%s", out.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("serve did not stop:\n%s", out.String())
	}
	if want := "systemd passed sockets that no configured listener names: unix:" + sock + " (ratelimitd.socket)"; !strings.Contains(out.String(), want) {
		t.Fatalf("output lacks %q:\n%s", want, out.String())
	}
}

// waitLog waits up to 10 s for the daemon's output to contain want.
func waitLog(t *testing.T, out *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the daemon's output:\n%s", want, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
