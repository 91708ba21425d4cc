package srvconn

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Bounds of DefaultMaxConns.
const (
	// MaxConnsCeiling is the largest default cap, far above one Postfix's
	// smtpd processes (default_process_limit 100).
	MaxConnsCeiling = 1024
	// limitLogEvery throttles the refusal log lines.
	limitLogEvery = 10 * time.Second
)

// DefaultMaxConns is the protocol listeners' connection cap:
// min(MaxConnsCeiling, RLIMIT_NOFILE/2), at least 1, leaving half the
// descriptors for the admin socket, metrics and files.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return MaxConnsCeiling
	}
	return int(max(1, min(uint64(MaxConnsCeiling), rl.Cur/2)))
}

// Limiter caps the connections open at once over the listeners it wraps;
// one over the cap is closed unread (the MTA applies its default action).
// Safe for concurrent use; make one with NewLimiter.
type Limiter struct {
	max     int64
	log     *slog.Logger
	refused func(listener string)

	open     atomic.Int64
	nRefused atomic.Int64
	logs     *ThrottledLog
}

// NewLimiter returns a Limiter of max connections (< 1: DefaultMaxConns()).
// refused, if not nil, is called per refusal with the listener's name and
// must not block; refusals are logged at most every 10 s.
func NewLimiter(max int, log *slog.Logger, refused func(listener string)) *Limiter {
	if max < 1 {
		max = DefaultMaxConns()
	}
	if log == nil {
		log = slog.Default()
	}
	return &Limiter{max: int64(max), log: log, refused: refused, logs: NewThrottledLog(log, limitLogEvery)}
}

// Max is the cap.
func (lim *Limiter) Max() int { return int(lim.max) }

// Open is the number of connections open now.
func (lim *Limiter) Open() int { return int(lim.open.Load()) }

// Refused is the number of connections closed over the cap so far.
func (lim *Limiter) Refused() int64 { return lim.nRefused.Load() }

// Listener wraps l: Accept returns only connections under the cap, each
// counted until its first Close; name labels the refusals.
func (lim *Limiter) Listener(l net.Listener, name string) net.Listener {
	return &limitListener{Listener: l, lim: lim, name: name}
}

type limitListener struct {
	net.Listener
	lim  *Limiter
	name string
}

// Accept returns the next connection under the cap; errors are the
// wrapped listener's.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.lim.open.Add(1) <= l.lim.max {
			return &limitConn{Conn: c, lim: l.lim}, nil
		}
		l.lim.open.Add(-1)
		// Counted before the close, so the client finds it in the metrics.
		l.lim.refuse(l.name, c)
		c.Close()
	}
}

func (lim *Limiter) refuse(name string, c net.Conn) {
	lim.nRefused.Add(1)
	if lim.refused != nil {
		lim.refused(name)
	}
	lim.logs.Warn("connection closed at once: max_connections reached", "listener", name,
		"remote", RemoteString(c), "max_connections", lim.max)
}

// limitConn gives its slot back on its first Close.
type limitConn struct {
	net.Conn
	lim  *Limiter
	once sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.lim.open.Add(-1) })
	return err
}

// HTTPConns is the connection cap of the HTTP listeners (/metrics, the
// console): min(16, RLIMIT_NOFILE/16), at least 2, so they can never take
// the protocol listeners' descriptors. Connections over it wait in the
// accept queue.
func HTTPConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 16
	}
	return int(max(2, min(16, rl.Cur/16)))
}
