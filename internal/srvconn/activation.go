package srvconn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
)

// Inherited are the listening sockets systemd passed (sd_listen_fds(3)),
// taken by their configured address; nil is none. Not safe for concurrent
// use.
type Inherited []inherited

type inherited struct {
	name  string // LISTEN_FDNAMES entry (systemd: the socket unit's name)
	l     net.Listener
	taken bool
}

// InheritedListeners returns the listeners systemd passed; call it once (it
// clears LISTEN_*). A descriptor not a listening stream socket is an error.
func InheritedListeners() (Inherited, error) {
	return inheritFiles(activation.Files(true))
}

// inheritFiles makes listeners of files, closing the files.
func inheritFiles(files []*os.File) (Inherited, error) {
	var in Inherited
	var errs []error
	for _, f := range files {
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("passed socket %s: not a listening stream socket: %w", f.Name(), err))
			continue
		}
		in = append(in, inherited{name: f.Name(), l: l})
	}
	if len(errs) > 0 {
		in.Close()
		return nil, errors.Join(errs...)
	}
	return in, nil
}

// Take returns the inherited listener for addr ("unix:/path" or a numeric
// "host:port"), or nil; the IPv4 and IPv6 unspecified addresses match.
func (in Inherited) Take(addr string) net.Listener {
	for i := range in {
		e := &in[i]
		if !e.taken && sameAddr(e.l.Addr(), addr) {
			e.taken = true
			return e.l
		}
	}
	return nil
}

// Len is the number of inherited listeners, taken or not.
func (in Inherited) Len() int { return len(in) }

// Untaken closes the listeners not taken and returns an error naming
// them: nobody would serve their clients.
func (in Inherited) Untaken() error {
	var names []string
	for i := range in {
		if e := &in[i]; !e.taken {
			e.l.Close()
			e.taken = true
			names = append(names, fmt.Sprintf("%s (%s)", Name(e.l), e.name))
		}
	}
	if len(names) > 0 {
		return fmt.Errorf("systemd passed sockets that no configured listener names: %s", strings.Join(names, ", "))
	}
	return nil
}

// Close closes the listeners not taken.
func (in Inherited) Close() { _ = in.Untaken() }

// Name is a listener's address as configured: "unix:/path" or host:port.
func Name(l net.Listener) string {
	if l.Addr().Network() == "unix" {
		return "unix:" + l.Addr().String()
	}
	return l.Addr().String()
}

// sameAddr reports whether a is the address configured as addr.
func sameAddr(a net.Addr, addr string) bool {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if a.Network() != "unix" {
			return false
		}
		abs, err := filepath.Abs(path)
		return err == nil && filepath.Clean(a.String()) == abs
	}
	ta, ok := a.(*net.TCPAddr)
	want, err := netip.ParseAddrPort(addr)
	if !ok || err != nil || ta.AddrPort().Port() != want.Port() {
		return false
	}
	g, w := ta.AddrPort().Addr().Unmap(), want.Addr().Unmap()
	return g == w || (g.IsUnspecified() && w.IsUnspecified())
}
