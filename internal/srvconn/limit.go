package srvconn

import (
	"net"
	"net/netip"
	"syscall"
	"time"
)

// Bounds and defaults of a front end's Budget. DefaultPerClient is above
// Postfix's default_process_limit (100), with room for a second policy
// service per smtpd; Postfix and Exim write their first request, a
// milter's MTA its SMFIC_OPTNEG, as soon as they are connected.
const (
	MaxConnsCeiling            = 1024 // the largest default cap
	DefaultPerClient           = 256
	DefaultFirstRequestTimeout = 10 * time.Second
	limitLogEvery              = 10 * time.Second // throttles the log of closed connections
)

// Reasons a Budget closes a connection: the label values of Budget.Closed
// and Stats.Closed.
const (
	ReasonMaxConnections = "max_connections"       // at Max, none idle: the new one closed unread
	ReasonMaxPerClient   = "max_per_client"        // at PerClient, none of the client's idle: likewise
	ReasonEvicted        = "evicted"               // the oldest idle closed to make room
	ReasonFirstRequest   = "first_request_timeout" // no complete first request in time (CountClosed)
)

// Reasons lists every reason, in the order status prints them.
var Reasons = [...]string{ReasonMaxConnections, ReasonMaxPerClient, ReasonEvicted, ReasonFirstRequest}

// DefaultMaxConns is the policy service's connection cap:
// min(MaxConnsCeiling, RLIMIT_NOFILE/2), at least 1.
func DefaultMaxConns() int { return nofileShare(2, 1, MaxConnsCeiling) }

// DefaultMilterConns is the milter's connection cap:
// min(MaxConnsCeiling, RLIMIT_NOFILE/4), at least 1.
func DefaultMilterConns() int { return nofileShare(4, 1, MaxConnsCeiling) }

// HTTPConns is the connection cap of the HTTP listeners (/metrics, the
// console): min(16, RLIMIT_NOFILE/16), at least 2.
func HTTPConns() int { return nofileShare(16, 2, 16) }

// nofileShare is RLIMIT_NOFILE/div within [lo, hi] (hi if unknown).
func nofileShare(div, lo, hi uint64) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return int(hi)
	}
	return int(max(lo, min(hi, rl.Cur/div)))
}

// Budget bounds one front end's connections over a Tracker's listeners.
// A new connection over a cap first closes the oldest idle one within it
// (MarkLocked), so silent connections cannot lock the MTA out; one inside
// a request is never closed for room. The zero value has no cap.
type Budget struct {
	Max int // < 1: no cap
	// PerClient caps one TCP client address (IPv4-mapped as IPv4); < 1 or
	// above Max: Max. Unix socket clients are not capped by address.
	PerClient int
	Closed    func(reason string) // if set, called per connection closed (a Reason); must not block
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
	Open      int              // connections open and not being closed
	Max       int              // Budget.Max (0: no cap)
	PerClient int              // the effective per-client cap (0: none)
	Closed    map[string]int64 // by reason, every reason present
}

// clientAddr is the address a per-client cap counts rwc under; zero for
// unix sockets and others.
func clientAddr(rwc net.Conn) netip.Addr {
	if ra, ok := rwc.RemoteAddr().(*net.TCPAddr); ok {
		return ra.AddrPort().Addr().Unmap().WithZone("")
	}
	return netip.Addr{}
}
