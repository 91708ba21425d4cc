package postfix

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// DefaultSocketMode is the mode of a socket asked for mode 0: owner and
// group (Postfix connects as the socket's group).
const DefaultSocketMode os.FileMode = 0o660

// ListenUnix listens on the unix socket path for "check_policy_service
// unix:private/ratelimitd" (SMTPD_POLICY_README). A stale socket is removed;
// ErrSocketInUse if a server accepts on path, ErrNotSocket if path is
// another file. The socket gets mode (0: DefaultSocketMode) and group (name
// or id); closing the listener removes it. Until the chmod the umask
// applies: keep it in a directory only the daemon and the MTA reach.
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

// ListenTCP listens on addr for "check_policy_service inet:host:port" and
// Exim readsocket; Server.AllowedNetworks decides who may talk.
func ListenTCP(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("postfix: %w", err)
	}
	return l, nil
}
