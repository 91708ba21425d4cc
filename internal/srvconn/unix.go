package srvconn

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Errors of ListenUnix, wrapped.
var (
	ErrNotSocket   = errors.New("srvconn: path exists and is not a socket (refusing to remove it)")
	ErrSocketInUse = errors.New("srvconn: socket in use: another daemon is already running on it")
)

// ListenUnix listens on a unix socket at path with mode (set after
// creation: keep it in a private directory). A stale socket is removed; a
// live one is ErrSocketInUse; any other file is ErrNotSocket. Close,
// idempotent, removes the file only if it is still the socket (inode).
func ListenUnix(path string, mode os.FileMode) (net.Listener, error) {
	if err := removeStale(path); err != nil {
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// net's own unlink on close removes whatever is at path by then.
	l.SetUnlinkOnClose(false)
	fail := func(err error) (net.Listener, error) {
		l.Close()
		os.Remove(path) // just created, nobody else's yet
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &unixListener{UnixListener: l, path: path, created: fi}, nil
}

// ListenUnixGroup is ListenUnix, then chowns the socket to group (name or
// id; "": unchanged) so the MTA's group can use mode 0660.
func ListenUnixGroup(path string, mode os.FileMode, group string) (net.Listener, error) {
	gid, err := strconv.Atoi(group)
	if group == "" {
		gid = -1
	} else if err != nil || gid < 0 {
		var g *user.Group
		if g, err = user.LookupGroup(group); err == nil {
			gid, err = strconv.Atoi(g.Gid)
		}
		if err != nil {
			return nil, fmt.Errorf("listen unix %s: group %q: %w", path, group, err)
		}
	}
	l, err := ListenUnix(path, mode)
	if err != nil || gid < 0 {
		return l, err
	}
	if err := os.Lchown(path, -1, gid); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	return l, nil
}

// removeStale removes path if it is a socket nobody accepts on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s is a %s", ErrNotSocket, path, fileKind(fi))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return ErrSocketInUse
	}
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("probing the existing socket: %w", err)
	}
	return os.Remove(path)
}

func fileKind(fi fs.FileInfo) string {
	switch t := fi.Mode().Type(); {
	case t == 0:
		return "regular file"
	case t&fs.ModeDir != 0:
		return "directory"
	case t&fs.ModeSymlink != 0:
		return "symbolic link"
	default:
		return "file of mode " + t.String()
	}
}

// unixListener is a unix listener that removes only its own socket file.
type unixListener struct {
	*net.UnixListener
	path    string
	created fs.FileInfo
	once    sync.Once
	err     error
}

// Close closes the listener and removes the socket file if it is still
// the one created.
func (l *unixListener) Close() error {
	l.once.Do(func() {
		l.err = l.UnixListener.Close()
		if fi, err := os.Lstat(l.path); err == nil && os.SameFile(fi, l.created) {
			os.Remove(l.path)
		}
	})
	return l.err
}
