package milter

import (
	"testing"

	gomilter "github.com/emersion/go-milter"
)

// TestLocalUserHeader: the uid is taken from the message's first header
// when it is X-Ratelimitd-Local-User on Postfix's non-SMTP connection
// (localhost [127.0.0.1], port 0), and from nowhere else: not on an SMTP
// connection, not from a later header, not when it is not a number.
func TestLocalUserHeader(t *testing.T) {
	for _, tc := range []struct {
		name       string
		host, addr string
		port       uint16
		headers    [][2]string
		want       string
	}{
		{"non-SMTP", "localhost", "127.0.0.1", 0, [][2]string{{"X-Ratelimitd-Local-User", "1001"}, {"Subject", "s"}}, "1001"},
		{"case and space", "localhost", "127.0.0.1", 0, [][2]string{{"x-ratelimitd-local-user", " 33 "}}, "33"},
		{"SMTP client", "client.example.com", "192.0.2.7", 41000, [][2]string{{"X-Ratelimitd-Local-User", "1001"}}, ""},
		{"SMTP from loopback", "localhost", "127.0.0.1", 41000, [][2]string{{"X-Ratelimitd-Local-User", "1001"}}, ""},
		{"not first", "localhost", "127.0.0.1", 0, [][2]string{{"Subject", "s"}, {"X-Ratelimitd-Local-User", "0"}}, ""},
		{"second copy ignored", "localhost", "127.0.0.1", 0, [][2]string{{"X-Ratelimitd-Local-User", "1001"}, {"X-Ratelimitd-Local-User", "0"}}, "1001"},
		{"not a uid", "localhost", "127.0.0.1", 0, [][2]string{{"X-Ratelimitd-Local-User", "root"}}, ""},
		{"too long", "localhost", "127.0.0.1", 0, [][2]string{{"X-Ratelimitd-Local-User", "12345678901"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := start(t, "tcp", &Server{})
			s := env.session(t)
			cont(t, "conn")(s.Conn(tc.host, gomilter.FamilyInet, tc.port, tc.addr))
			cont(t, "helo")(s.Helo("localhost"))
			transaction(t, s, "someone-else@example.com", []string{"bob@example.org"}, testMsg{headers: tc.headers, body: [][]byte{[]byte("hi\r\n")}}, "Q1")
			if got := env.dec.eom()[0].LocalUser; got != tc.want {
				t.Errorf("LocalUser %q, want %q", got, tc.want)
			}
		})
	}
}
