package srvconn

import (
	"net"
	"net/netip"
	"testing"
)

// fakeAddrConn only carries a remote address, for the allow-list matching.
type fakeAddrConn struct {
	net.Conn
	addr net.Addr
}

func (c fakeAddrConn) RemoteAddr() net.Addr { return c.addr }

type otherAddr struct{}

func (otherAddr) Network() string { return "pipe" }
func (otherAddr) String() string  { return "pipe" }

func TestAllowed(t *testing.T) {
	tcp := func(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	list := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		list []netip.Prefix
		addr net.Addr
		unix bool
		want bool
	}{
		{nil, tcp("127.0.0.1:1"), false, true},
		{nil, tcp("127.9.9.9:1"), false, true},
		{nil, tcp("[::1]:1"), false, true},
		{nil, tcp("[::ffff:127.0.0.1]:1"), false, true},
		{nil, tcp("192.0.2.1:1"), false, false},
		{nil, tcp("[2001:db8::1]:1"), false, false},
		{list, tcp("192.0.2.1:1"), false, true},
		{list, tcp("[::ffff:192.0.2.1]:1"), false, true},
		{list, tcp("[2001:db8::1%eth0]:1"), false, true},
		{list, tcp("192.0.3.1:1"), false, false},
		{list, tcp("127.0.0.1:1"), false, false},
		{list, &net.UnixAddr{Net: "unix"}, true, true},
		{nil, otherAddr{}, false, false},
		{nil, otherAddr{}, true, true},
	} {
		if got := Allowed(tc.list, fakeAddrConn{addr: tc.addr}, tc.unix); got != tc.want {
			t.Errorf("allowed(%v, list %v, unix %v) = %v, want %v", tc.addr, tc.list, tc.unix, got, tc.want)
		}
	}
}
