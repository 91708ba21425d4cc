package postfix

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// DefaultSocketMode is the file mode ListenUnix gives a socket when asked
// for mode 0: read and write for the owner and the group (Postfix connects
// as a member of the socket's group, typically "postfix").
const DefaultSocketMode os.FileMode = 0o660

// ListenUnix listens on the unix-domain socket path, for
// "check_policy_service unix:/path" (SMTPD_POLICY_README, "Simple policy
// client/server configuration"). For Postfix's chroot the socket usually
// lives below the queue directory, e.g. /var/spool/postfix/private/ratelimitd,
// named "unix:private/ratelimitd" in main.cf.
//
// A stale socket left by a previous run is removed first. ListenUnix returns
// an error wrapping ErrSocketInUse if another server accepts connections on
// path, and ErrNotSocket if path exists and is not a socket. The socket is
// given mode (0 means DefaultSocketMode) and, if group is not empty, group
// ownership of group (a name, or a numeric id); on failure the socket is
// removed again. Closing the listener removes the socket if it is still
// the one ListenUnix created (srvconn.ListenUnix).
//
// Between its creation and the chmod the socket has the mode the process
// umask gives it; keep it in a directory that only the daemon and the MTA can
// reach (as Postfix's private/ is).
func ListenUnix(path string, mode os.FileMode, group string) (net.Listener, error) {
	if mode == 0 {
		mode = DefaultSocketMode
	}
	l, err := srvconn.ListenUnixGroup(path, mode, group)
	switch {
	case errors.Is(err, srvconn.ErrNotSocket):
		return nil, fmt.Errorf("postfix: %w: %w", ErrNotSocket, err)
	case errors.Is(err, srvconn.ErrSocketInUse):
		return nil, fmt.Errorf("postfix: %w: %w", ErrSocketInUse, err)
	case err != nil:
		return nil, fmt.Errorf("postfix: %w", err)
	}
	return l, nil
}

// ListenTCP listens on the TCP address addr ("127.0.0.1:10031", "[::1]:10031"),
// for "check_policy_service inet:host:port" and Exim readsocket
// (SMTPD_POLICY_README, "Simple policy client/server configuration"). It
// only listens: the Server's AllowedNetworks decides who may talk to it,
// loopback only by default. Prefer a loopback or unix socket where the MTA
// runs on the same host.
func ListenTCP(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	return l, nil
}
