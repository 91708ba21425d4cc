package srvconn

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// listenerFile returns a duplicate descriptor of l as systemd would pass
// it, named name, and closes l.
func listenerFile(t *testing.T, l net.Listener, name string) *os.File {
	t.Helper()
	f, err := l.(interface{ File() (*os.File, error) }).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l.Close()
	fd, err := syscall.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), name)
}

// TestInheritedSocketsTakenByAddress checks that passed sockets are taken
// by the addresses they are configured with (a unix path, a TCP address;
// the unspecified addresses of IPv4 and IPv6 alike), each once, that an
// inherited unix listener leaves its socket file when closed, and that
// the ones nobody took are named by Untaken.
func TestInheritedSocketsTakenByAddress(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "policy")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ul.(*net.UnixListener).SetUnlinkOnClose(false)
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(tl.Addr().(*net.TCPAddr).Port)
	any6, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Fatal(err)
	}
	port6 := strconv.Itoa(any6.Addr().(*net.TCPAddr).Port)
	spare, err := net.Listen("unix", filepath.Join(dir, "spare"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := inheritFiles([]*os.File{listenerFile(t, ul, "ratelimitd.socket"), listenerFile(t, tl, "tcp"),
		listenerFile(t, any6, "any"), listenerFile(t, spare, "spare.socket")})
	if err != nil {
		t.Fatal(err)
	}
	if in.Len() != 4 {
		t.Fatalf("Len = %d, want 4", in.Len())
	}
	if l := in.Take("unix:" + filepath.Join(dir, "other")); l != nil {
		t.Fatalf("Take of another path returned %v", l.Addr())
	}
	if l := in.Take("127.0.0.2:" + port); l != nil {
		t.Fatalf("Take of another address returned %v", l.Addr())
	}
	got := in.Take("unix:" + sock)
	if got == nil || got.Addr().String() != sock {
		t.Fatalf("Take(unix:%s) = %v", sock, got)
	}
	if again := in.Take("unix:" + sock); again != nil {
		t.Fatal("a listener was taken twice")
	}
	if l := in.Take("127.0.0.1:" + port); l == nil {
		t.Fatal("the TCP listener was not taken by its address")
	}
	if l := in.Take("0.0.0.0:" + port6); l == nil {
		t.Fatal("[::]:PORT was not taken for 0.0.0.0:PORT")
	}

	go func() {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
		}
	}()
	c, err := got.Accept()
	if err != nil {
		t.Fatalf("accept on the inherited socket: %v", err)
	}
	c.Close()
	got.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("closing an inherited listener removed its socket file: %v", err)
	}

	err = in.Untaken()
	if err == nil || !strings.Contains(err.Error(), "unix:"+filepath.Join(dir, "spare")+" (spare.socket)") {
		t.Fatalf("Untaken = %v, want the spare socket named", err)
	}
	if err := in.Untaken(); err != nil {
		t.Fatalf("second Untaken = %v", err)
	}
}

// TestInheritedNotAListener checks that a passed descriptor that is not a
// listening socket is refused.
func TestInheritedNotAListener(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inheritFiles([]*os.File{f}); err == nil || !strings.Contains(err.Error(), "not a listening stream socket") {
		t.Fatalf("inheritFiles(/dev/null) = %v", err)
	}
}

// TestNoInheritedSockets checks that a process not started by socket
// activation has no inherited listeners, and that a nil Inherited takes
// nothing and reports nothing.
func TestNoInheritedSockets(t *testing.T) {
	t.Setenv("LISTEN_PID", "")
	t.Setenv("LISTEN_FDS", "")
	in, err := InheritedListeners()
	if err != nil || in.Len() != 0 || in.Take("unix:/x") != nil || in.Untaken() != nil {
		t.Fatalf("InheritedListeners without LISTEN_* = %v, %v", in, err)
	}
	var none Inherited
	if none.Take("127.0.0.1:1") != nil || none.Untaken() != nil || none.Len() != 0 {
		t.Fatal("nil Inherited")
	}
	none.Close()
}
