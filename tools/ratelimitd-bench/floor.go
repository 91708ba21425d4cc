package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
)

// The floor is the protocol without the rate limits: the daemon's own
// policy server (mta/postfix.Server: same codec, same connection handling,
// same reply writer) with a Decider that answers DUNNO without deciding.
// What ratelimitd costs above it is the engine, the rate store, its
// persistence and the daemon's metrics and logging.

// floorServeFlag runs this program as the floor server (hidden: it is how
// the program starts its own floor process).
const floorServeFlag = "--floor-serve"

// newFloorServer returns the floor policy server, configured like the
// daemon's (default timeouts, loopback only, an Info logger on logw: the
// floor, like the daemon, logs nothing for a DUNNO).
func newFloorServer(logw io.Writer) *postfix.Server {
	return &postfix.Server{
		Decider: mta.DeciderFunc(func(context.Context, *policy.Request) policy.Decision {
			return policy.Decision{}
		}),
		Logger: slog.New(slog.NewTextHandler(logw, nil)),
	}
}

// serveFloor is the floor process: it listens on each of addrs (host:port
// or unix:/path), prints "listening ADDR..." (the TCP addresses with their
// ports) on stdout, and serves until SIGTERM/SIGINT or until its stdin
// ends (the parent went away).
func serveFloor(addrs []string) int {
	srv := newFloorServer(os.Stderr)
	var ls []net.Listener
	var names []string
	for _, addr := range addrs {
		var l net.Listener
		var err error
		if path, ok := strings.CutPrefix(addr, "unix:"); ok {
			l, err = srvconn.ListenUnix(path, 0o600)
		} else {
			l, err = net.Listen("tcp", addr)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			for _, l := range ls {
				l.Close()
			}
			return 1
		}
		ls = append(ls, l)
		if l.Addr().Network() == "unix" {
			names = append(names, "unix:"+l.Addr().String())
		} else {
			names = append(names, l.Addr().String())
		}
	}
	fmt.Printf("listening %s\n", strings.Join(names, " "))
	for _, l := range ls {
		go srv.Serve(l)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-stop:
	case <-eof:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		srv.Close()
	}
	return 0
}

// startFloor starts the floor process (this program with floorServeFlag)
// on a free loopback port and, if unixPath is not "", on that unix socket
// too, restricted to cpus unless that is nil (--pin), and returns it once
// it listens (child.addr is the TCP address, child.unixAddr "unix:PATH"
// or "").
func startFloor(ctx context.Context, logPath, unixPath string, cpus []int) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{floorServeFlag, "127.0.0.1:0"}
	if unixPath != "" {
		args = append(args, "unix:"+unixPath)
	}
	cmd := exec.Command(exe, args...)
	stdin, err := cmd.StdinPipe() // closed when we exit: the floor then stops
	if err != nil {
		return nil, err
	}
	stdout, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		stdout.Close()
		w.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = w, logf
	c, err := startChild("floor", cmd, logPath, cpus)
	w.Close()
	logf.Close()
	if err != nil {
		stdout.Close()
		return nil, err
	}
	c.stdin = stdin
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
		stdout.Close()
	}()
	select {
	case s := <-line:
		addrs, ok := strings.CutPrefix(strings.TrimSpace(s), "listening ")
		f := strings.Fields(addrs)
		if !ok || len(f) != len(args)-1 {
			c.stop(5 * time.Second)
			return nil, fmt.Errorf("floor did not start: %q%s", s, c.logTail())
		}
		c.addr = f[0]
		if len(f) > 1 {
			c.unixAddr = f[1]
		}
		return c, nil
	case <-time.After(30 * time.Second):
		c.stop(5 * time.Second)
		return nil, fmt.Errorf("floor did not start within 30s%s", c.logTail())
	case <-ctx.Done():
		c.stop(5 * time.Second)
		return nil, ctx.Err()
	}
}
