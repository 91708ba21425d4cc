package daemon

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// dialSilent opens n TCP connections to addr that never send a byte,
// closed at the end of the test.
func dialSilent(t *testing.T, addr string, n int) {
	t.Helper()
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("silent connection: %v", err)
		}
		t.Cleanup(func() { c.Close() })
	}
}

// 1,030 silent TCP connections to the policy service do not silence it:
// a real policy request is answered within 1 s and the milter, with a
// budget of its own, still negotiates; the connections that gave way are
// counted, and so are those closed by the first-request timeout.
func TestSilentFloodCannotStarvePolicy(t *testing.T) {
	milterAddr := loopback(t)
	cfgPath := testConfig(t, t.TempDir(), loopback(t), fmt.Sprintf("\n[milter]\nlisten = %q\n", milterAddr))
	maddr := serveMetrics(t, cfgPath)
	setConfig(t, cfgPath, `log_level = "debug"`, `log_level = "info"`) // as installed
	td := startTestDaemon(t, cfgPath)
	const flood = 1030
	for round := range 3 {
		dialSilent(t, td.policyAddr, flood)
		// The flood is held open: wait until the daemon has taken every
		// silent connection (kept, or closed to make room for a newer one).
		for i := 0; ; i++ {
			st := td.policy.ConnStats()
			if st.Open+int(st.Closed[srvconn.ReasonEvicted]+st.Closed[srvconn.ReasonFirstRequest]) >= (round+1)*flood {
				break
			}
			if i == 3000 {
				t.Fatalf("round %d: the daemon took %d of %d silent connections: %+v", round,
					st.Open+int(st.Closed[srvconn.ReasonEvicted]), (round+1)*flood, st)
			}
			time.Sleep(10 * time.Millisecond)
		}
		c, err := net.DialTimeout("tcp", td.policyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		c.SetDeadline(sent.Add(time.Second)) // the bound
		fmt.Fprintf(c, "request=smtpd_access_policy\nprotocol_state=RCPT\nsasl_username=flood%d\nclient_address=192.0.2.9\n\n", round)
		line, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if err != nil || !strings.HasPrefix(line, "action=") {
			t.Fatalf("round %d: policy request after %d silent connections: %q, %v after %v", round, flood, line, err, time.Since(sent))
		}
		mc := gomilter.NewClientWithOptions("tcp", milterAddr, gomilter.ClientOptions{
			Dialer: &net.Dialer{Timeout: 5 * time.Second}, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
			ActionMask: gomilter.OptAddHeader | gomilter.OptQuarantine})
		s, err := mc.Session()
		if err != nil {
			t.Fatalf("round %d: milter negotiation after %d silent policy connections: %v", round, flood, err)
		}
		s.Close()
	}
	st := td.adminStatus()
	if len(st.Connections) != 2 || st.Connections[0].FrontEnd != "policy" || st.Connections[0].Max != srvconn.MaxConnsCeiling ||
		st.Connections[0].Closed[srvconn.ReasonEvicted] < 3*flood-srvconn.MaxConnsCeiling {
		t.Fatalf("status connections %+v; want the policy budget at %d with at least %d evicted", st.Connections,
			srvconn.MaxConnsCeiling, 3*flood-srvconn.MaxConnsCeiling)
	}
	resp, err := http.Get("http://" + maddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ratelimitd_connections_refused_total{listener="policy",reason="evicted"} `,
		`ratelimitd_connections_refused_total{listener="milter",reason="max_per_client"} 0`,
		`ratelimitd_connections_open{listener="milter"} `, `ratelimitd_connections_max{listener="policy"} 1024`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// A policy connection that sends no complete request within
// first_request_timeout is closed and counted; one that sent its request
// at once stays open between requests.
func TestFirstRequestTimeoutClosesSilentConnections(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), "")
	setConfig(t, cfgPath, "[server]\n", "[server]\nfirst_request_timeout = \"300ms\"\n")
	td := startTestDaemon(t, cfgPath)
	for range 3 {
		silent, err := net.DialTimeout("tcp", td.policyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		partial, err := net.DialTimeout("tcp", td.policyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(partial, "request=smtpd_access_policy\nprotocol_state=RCPT\n")
		busy, err := net.DialTimeout("tcp", td.policyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(busy)
		for i := range 2 {
			if i == 1 {
				time.Sleep(600 * time.Millisecond) // past the first-request timeout
			}
			busy.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(busy, "request=smtpd_access_policy\nprotocol_state=RCPT\nsasl_username=early\n\n")
			if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "action=") {
				t.Fatalf("request %d on a connection that asked at once: %q %v", i, line, err)
			}
			br.ReadString('\n')
		}
		for _, c := range []net.Conn{silent, partial} {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if n, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("connection without a complete first request: read %d, %v; want EOF", n, err)
			}
			c.Close()
		}
		busy.Close()
	}
	if got := td.adminStatus().Connections[0].Closed[srvconn.ReasonFirstRequest]; got != 6 {
		t.Fatalf("first_request_timeout closed %d connections, want 6", got)
	}
}

// setConfig replaces old with new in the configuration file at path.
func setConfig(t *testing.T, path, old, new string) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(text), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Idle keep-alive connections to /metrics at its cap give way to a new
// scrape: it is served at once, not after the 30 s idle timeout.
func TestIdleKeepAlivesCannotBlockMetrics(t *testing.T) {
	cfgPath := testConfig(t, t.TempDir(), loopback(t), "")
	maddr := serveMetrics(t, cfgPath)
	startTestDaemon(t, cfgPath)
	n := srvconn.HTTPConns()
	for round := range 3 {
		// n scrapes at once open n connections, left idle in the pool.
		pool := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
		defer pool.CloseIdleConnections()
		scrapers := &http.Client{Transport: pool, Timeout: 10 * time.Second}
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if resp, err := scrapers.Get("http://" + maddr + "/metrics"); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := hc.Get("http://" + maddr + "/metrics")
		if err != nil {
			t.Fatalf("round %d: scrape with %d idle keep-alive connections open: %v", round, n, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("round %d: status %d", round, resp.StatusCode)
		}
	}
}
