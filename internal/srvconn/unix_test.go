package srvconn

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// A file that is not a socket is never removed to make room for one.
func TestListenUnixRefusesNonSocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "important")
	os.WriteFile(file, []byte("keep me"), 0o600)
	if _, err := ListenUnix(file, 0o660); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("ListenUnix on a regular file: %v, want ErrNotSocket", err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "keep me" {
		t.Fatalf("the file was touched: %q, %v", b, err)
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o700)
	if _, err := ListenUnix(sub, 0o660); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("ListenUnix on a directory: %v, want ErrNotSocket", err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(file, link)
	if _, err := ListenUnix(link, 0o660); !errors.Is(err, ErrNotSocket) {
		t.Fatalf("ListenUnix on a symlink: %v, want ErrNotSocket", err)
	}
}

// A socket a server answers on means another daemon is running; a stale
// one (nobody accepting) is replaced.
func TestListenUnixLiveAndStale(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode: %v %v", fi, err)
	}
	if _, err := ListenUnix(path, 0o660); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("second ListenUnix on a live socket: %v, want ErrSocketInUse", err)
	}
	// A stale socket: created by a listener that is gone without unlinking.
	l.(*unixListener).UnixListener.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("stale socket should still exist: %v", err)
	}
	l2, err := ListenUnix(path, 0o660)
	if err != nil {
		t.Fatalf("ListenUnix over a stale socket: %v", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("dial the new socket: %v", err)
	} else {
		c.Close()
	}
	l2.Close()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left its own socket: %v", err)
	}
}

// Close removes the socket only if it is still the one it created.
func TestListenUnixCloseRemovesOnlyItsOwn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	l, err := ListenUnix(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	os.WriteFile(path, []byte("someone else's"), 0o600)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "someone else's" {
		t.Fatalf("Close removed a file it did not create: %q, %v", b, err)
	}
	l.Close() // twice is fine
}
