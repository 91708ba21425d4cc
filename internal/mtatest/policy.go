package mtatest

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// PolicyAsk sends one Postfix policy delegation request (SMTPD_POLICY_README)
// with attrs ("name=value") to addr (host:port, or unix:PATH) over a new
// connection and returns the action line.
func PolicyAsk(t testing.TB, addr string, attrs ...string) string {
	t.Helper()
	network := "tcp"
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		network, addr = "unix", path
	}
	c, err := net.DialTimeout(network, addr, 5*time.Second)
	must(t, err)
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "request=smtpd_access_policy\n%s\n\n", strings.Join(attrs, "\n"))
	line, err := bufio.NewReader(c).ReadString('\n')
	must(t, err)
	return strings.TrimSpace(line)
}
