package srvconn

import (
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Bounds and defaults of a front end's Budget.
const (
	// MaxConnsCeiling is the largest default cap, far above one Postfix's
	// smtpd processes (default_process_limit 100).
	MaxConnsCeiling = 1024
	// DefaultPerClient is the default cap on one client address's
	// connections: above default_process_limit, so one Postfix host with
	// its smtpd processes at the limit fits, with room for a second
	// policy service per process.
	DefaultPerClient = 256
	// DefaultFirstRequestTimeout bounds the wait for a connection's first
	// complete request: Postfix and Exim write theirs as soon as they are
	// connected, a milter's MTA its SMFIC_OPTNEG.
	DefaultFirstRequestTimeout = 10 * time.Second
	// limitLogEvery throttles the log lines of closed connections.
	limitLogEvery = 10 * time.Second
)

// Reasons a Budget closes a connection: the label values of
// Budget.Closed and Stats.Closed.
const (
	// ReasonMaxConnections: at Budget.Max with no idle connection to
	// close, a new connection is closed unread.
	ReasonMaxConnections = "max_connections"
	// ReasonMaxPerClient: at Budget.PerClient with none of that client's
	// connections idle, its new connection is closed unread.
	ReasonMaxPerClient = "max_per_client"
	// ReasonEvicted: an idle connection was closed to make room for a new
	// one (the oldest idle first).
	ReasonEvicted = "evicted"
	// ReasonFirstRequest: no complete request within the first-request
	// timeout; counted by the protocol server (Tracker.CountClosed).
	ReasonFirstRequest = "first_request_timeout"
)

// Reasons lists every reason, in the order status prints them.
var Reasons = []string{ReasonMaxConnections, ReasonMaxPerClient, ReasonEvicted, ReasonFirstRequest}

// DefaultMaxConns is the policy service's connection cap:
// min(MaxConnsCeiling, RLIMIT_NOFILE/2), at least 1, leaving half the
// descriptors for the milter, the admin socket, metrics and files.
func DefaultMaxConns() int { return nofileShare(2) }

// DefaultMilterConns is the milter's connection cap:
// min(MaxConnsCeiling, RLIMIT_NOFILE/4), at least 1.
func DefaultMilterConns() int { return nofileShare(4) }

// nofileShare is min(MaxConnsCeiling, RLIMIT_NOFILE/div), at least 1.
func nofileShare(div uint64) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return MaxConnsCeiling
	}
	return int(max(1, min(uint64(MaxConnsCeiling), rl.Cur/div)))
}

// Budget bounds one front end's connections, over all the listeners one
// Tracker serves. A new connection over a cap first closes the oldest idle
// connection within that cap (idle as the protocol marks it, MarkLocked):
// a flood of silent connections cannot lock the MTA out, while a
// connection in the middle of a request is never closed for room. The zero
// value has no cap.
type Budget struct {
	// Max caps the connections open at once; < 1: no cap.
	Max int
	// PerClient caps the connections open at once from one TCP client
	// address (IPv4-mapped as IPv4); < 1 or above Max: Max. Unix socket
	// clients are not capped by address.
	PerClient int
	// Closed, if set, is called with the reason (ReasonMaxConnections,
	// ReasonMaxPerClient, ReasonEvicted, ReasonFirstRequest) of every
	// connection the budget closes; it must not block.
	Closed func(reason string)
}

// perClient is b's effective per-client cap (0: none).
func (b Budget) perClient() int {
	if b.Max < 1 {
		return max(b.PerClient, 0)
	}
	if b.PerClient < 1 || b.PerClient > b.Max {
		return b.Max
	}
	return b.PerClient
}

// Stats is a Tracker's connection budget now.
type Stats struct {
	Open      int // connections open and not being closed
	Max       int // Budget.Max (0: no cap)
	PerClient int // the effective per-client cap (0: none)
	// Closed counts connections closed by the budget, by reason (every
	// reason present).
	Closed map[string]int64
}

// clientAddr is the address a per-client cap counts rwc under; the zero
// Addr for unix sockets and others.
func clientAddr(rwc net.Conn) netip.Addr {
	if ra, ok := rwc.RemoteAddr().(*net.TCPAddr); ok {
		if a, ok := netip.AddrFromSlice(ra.IP); ok {
			return a.Unmap()
		}
	}
	return netip.Addr{}
}

// HTTPConns is the connection cap of the HTTP listeners (/metrics, the
// console): min(16, RLIMIT_NOFILE/16), at least 2, so they can never take
// the protocol listeners' descriptors.
func HTTPConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 16
	}
	return int(max(2, min(16, rl.Cur/16)))
}
