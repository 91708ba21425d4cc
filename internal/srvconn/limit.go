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
	// MaxConnsCeiling is the largest default connection cap: far more
	// than the smtpd processes of one Postfix (default_process_limit 100)
	// that hold a policy or milter connection each.
	MaxConnsCeiling = 1024
	// limitLogEvery is how often, at most, refused connections are
	// logged (with the count since the last line).
	limitLogEvery = 10 * time.Second
)

// DefaultMaxConns is the default connection cap for the protocol
// listeners: min(MaxConnsCeiling, RLIMIT_NOFILE/2), so that at the cap half
// of the process's file descriptors are still free for the admin socket,
// the metrics listener, the state file and spool files. (The Go runtime
// raises the soft RLIMIT_NOFILE to the hard limit at start-up; this reads
// the limit in force.) It returns MaxConnsCeiling if the limit cannot be
// read, and at least 1.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return MaxConnsCeiling
	}
	return int(max(1, min(uint64(MaxConnsCeiling), rl.Cur/2)))
}

// Limiter caps the connections open at once over every listener it wraps
// (the policy and milter listeners share one), so that a flood of
// connections cannot use up the file descriptors the admin socket and the
// metrics listener need. A connection accepted over the cap is closed at
// once, before anything is read or written: the MTA sees the connection
// closed and applies its own fallback (Postfix: the policy client's
// default_action, the milter's milter_default_action).
//
// A Limiter is safe for concurrent use. Make one with NewLimiter.
type Limiter struct {
	max     int64
	log     *slog.Logger
	refused func(listener string)

	open     atomic.Int64
	nRefused atomic.Int64

	mu        sync.Mutex // guards the log throttle
	lastLog   time.Time
	sinceLast int64
}

// NewLimiter returns a Limiter allowing max connections at once (max < 1
// means DefaultMaxConns()). refused, if non-nil, is called for every
// connection closed over the cap, with the name the listener was wrapped
// under (for a metric); it must not block. Refusals are logged at WARN on
// log at most once every 10 s, with the count since the previous line.
func NewLimiter(max int, log *slog.Logger, refused func(listener string)) *Limiter {
	if max < 1 {
		max = DefaultMaxConns()
	}
	if log == nil {
		log = slog.Default()
	}
	return &Limiter{max: int64(max), log: log, refused: refused}
}

// Max is the cap.
func (lim *Limiter) Max() int { return int(lim.max) }

// Open is the number of connections open now.
func (lim *Limiter) Open() int { return int(lim.open.Load()) }

// Refused is the number of connections closed over the cap so far.
func (lim *Limiter) Refused() int64 { return lim.nRefused.Load() }

// Listener wraps l: its Accept returns only connections under the cap,
// closing the others at once, and a returned connection counts as open
// until its first Close. name ("policy", "milter") labels the refusals.
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
		// Counted and logged before the close: a client that has seen
		// its connection closed finds the refusal in the metrics.
		l.lim.refuse(l.name, c)
		c.Close()
	}
}

func (lim *Limiter) refuse(name string, c net.Conn) {
	lim.nRefused.Add(1)
	if lim.refused != nil {
		lim.refused(name)
	}
	lim.mu.Lock()
	lim.sinceLast++
	now := time.Now()
	if now.Sub(lim.lastLog) < limitLogEvery {
		lim.mu.Unlock()
		return
	}
	n := lim.sinceLast
	lim.lastLog, lim.sinceLast = now, 0
	lim.mu.Unlock()
	lim.log.Warn("connection closed at once: max_connections reached", "listener", name,
		"remote", RemoteString(c), "max_connections", lim.max, "refused_since_last_log", n)
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

// HTTPConns is the connection cap of the HTTP listeners anyone on the
// network may reach (/metrics, the console): min(16, RLIMIT_NOFILE/16), at least 2. With
// the protocol listeners capped at RLIMIT_NOFILE/2 (DefaultMaxConns), the
// HTTP listeners together can never take the descriptors the policy
// service needs: 120 idle keep-alive scrapes of /metrics used to exhaust a
// 64-descriptor process and silence every listener. Connections over the
// cap wait in the kernel's accept queue, using no descriptor of ours.
func HTTPConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 16
	}
	return int(max(2, min(16, rl.Cur/16)))
}
