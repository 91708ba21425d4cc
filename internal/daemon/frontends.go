package daemon

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
)

// frontEnds remembers when an MTA last connected to each front-end
// listener, for status.
type frontEnds struct {
	mu   sync.Mutex
	list []*seenListener
}

// seenListener is a listener that records each accepted connection.
type seenListener struct {
	net.Listener
	frontEnd string // "policy" or "milter"
	name     string
	last     atomic.Int64
	count    atomic.Int64
}

// Accept records the time of each accepted connection.
func (l *seenListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.last.Store(time.Now().UnixNano())
		l.count.Add(1)
	}
	return c, err
}

// watch returns l, recording its connections under frontEnd, named name.
func (f *frontEnds) watch(l net.Listener, frontEnd, name string) net.Listener {
	s := &seenListener{Listener: l, frontEnd: frontEnd, name: name}
	f.mu.Lock()
	f.list = append(f.list, s)
	f.mu.Unlock()
	return s
}

// status returns each watched listener's connections, in watch order.
func (f *frontEnds) status() []admin.FrontEndStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]admin.FrontEndStatus, 0, len(f.list))
	for _, s := range f.list {
		st := admin.FrontEndStatus{FrontEnd: s.frontEnd, Listen: s.name, Connections: s.count.Load()}
		if ns := s.last.Load(); ns != 0 {
			st.LastConnect = time.Unix(0, ns)
		}
		out = append(out, st)
	}
	return out
}
