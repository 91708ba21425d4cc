package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
)

// TestMain lets the test binary serve as the floor process that run
// starts (it re-executes itself with floorServeFlag, like the program).
func TestMain(m *testing.M) {
	if len(os.Args) >= 3 && os.Args[1] == floorServeFlag {
		os.Exit(serveFloor(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// startTestFloor runs the floor server in-process on 127.0.0.1:0.
func startTestFloor(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newFloorServer(io.Discard)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String()
}

// attrNames returns the attribute names of a request, in order.
func attrNames(t *testing.T, req []byte) []string {
	t.Helper()
	var names []string
	for line := range strings.SplitSeq(strings.TrimSuffix(string(req), "\n\n"), "\n") {
		name, _, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("line %q has no '='", line)
		}
		names = append(names, name)
	}
	return names
}

// The rendered requests carry the attributes of the Postfix transcripts in
// testdata/postfix, in the same order, and decode to the patched user,
// instance and queue id.
func TestRequestsLikePostfix(t *testing.T) {
	m := newMessage(3, 2)
	m.next(123456, 0xabc)
	for _, tc := range []struct {
		file string
		req  []byte
	}{{"rcpt.txt", m.rcpt.b}, {"eom.txt", m.eom.b}} {
		want, err := os.ReadFile("../../testdata/postfix/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		got, wantNames := attrNames(t, tc.req), attrNames(t, want)
		if strings.Join(got, " ") != strings.Join(wantNames, " ") {
			t.Errorf("%s: attributes\n got %q\nwant %q", tc.file, got, wantNames)
		}
		var req policy.Request
		if err := postfix.NewDecoder(bufio.NewReader(bytes.NewReader(tc.req))).Decode(&req); err != nil {
			t.Fatalf("%s: %v\n%s", tc.file, err, tc.req)
		}
		if req.SASLUsername != "user0123456@example.org" || req.Sender != req.SASLUsername {
			t.Errorf("%s: sasl_username %q sender %q", tc.file, req.SASLUsername, req.Sender)
		}
		if req.Instance != "0003.6553a0f1.00000abc.0" {
			t.Errorf("%s: instance %q", tc.file, req.Instance)
		}
	}
	var eom policy.Request
	postfix.NewDecoder(bufio.NewReader(bytes.NewReader(m.eom.b))).Decode(&eom)
	if eom.ProtocolState != policy.StateEndOfMessage || eom.QueueID != "000300000ABC" || eom.RecipientCount != 2 {
		t.Errorf("END-OF-MESSAGE: state %q queue_id %q recipient_count %d", eom.ProtocolState, eom.QueueID, eom.RecipientCount)
	}
	if got := userName(42); got != "user0000042@example.org" {
		t.Errorf("userName(42) = %q", got)
	}
}

// The floor answers DUNNO to every rendered request on one connection.
func TestFloorAnswersDUNNO(t *testing.T) {
	addr := startTestFloor(t)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	m := newMessage(0, 1)
	for i := range 5 {
		m.next(i, uint64(i))
		for _, req := range [][]byte{m.rcpt.b, m.eom.b} {
			if _, err := c.Write(req); err != nil {
				t.Fatal(err)
			}
			reply := make([]byte, len("action=DUNNO\n\n"))
			if _, err := io.ReadFull(br, reply); err != nil {
				t.Fatal(err)
			}
			if string(reply) != "action=DUNNO\n\n" {
				t.Fatalf("reply %q", reply)
			}
		}
	}
}

// A one-second run against the floor with two connections measures a
// rate and ordered percentiles, without errors or refusals.
func TestRunAgainstFloor(t *testing.T) {
	addr := startTestFloor(t)
	res, err := runLoad(context.Background(), loadSpec{Addr: addr, Conns: 2, Keys: 100, Pick: pickRandom,
		Rcpts: 1, Warmup: 100 * time.Millisecond, Duration: time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	p50, p99 := res.Hist.quantile(0.5), res.Hist.quantile(0.99)
	t.Logf("%d requests in %s: %.0f/s, p50 %s, p99 %s", res.Requests, res.Elapsed, res.Rate(), p50, p99)
	if res.Errors != 0 || res.Refused != 0 {
		t.Errorf("errors %d (%v), refused %d", res.Errors, res.FirstErr, res.Refused)
	}
	if res.Requests == 0 || res.Rate() <= 0 {
		t.Fatalf("no requests measured")
	}
	if p50 <= 0 || p50 > p99 || p99 > res.Hist.max {
		t.Errorf("p50 %s, p99 %s, max %s", p50, p99, res.Hist.max)
	}

	// Distinct mode answers each user exactly once, then stops.
	res, err = runLoad(context.Background(), loadSpec{Addr: addr, Conns: 3, Distinct: 100, Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 100 || res.Errors != 0 {
		t.Errorf("distinct: %d requests, %d errors (%v)", res.Requests, res.Errors, res.FirstErr)
	}
}

// The whole program against an in-process "target" (a floor server) and
// its own floor process: a row per target and cell, and the ratios.
func TestRunProgram(t *testing.T) {
	addr := startTestFloor(t)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--addr", addr, "--conns", "2,64", "--keys", "10,100000",
		"--duration", "400ms", "--warmup", "0s", "--rounds", "2"}, &out, &errOut)
	t.Log(out.String())
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"tcp  floor           2       10", "tcp  ratelimitd      2       10", "ratelimitd/floor", "target tcp C=64"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(out.String(), " 0.00x") || strings.Contains(out.String(), " 0ns ") {
		t.Errorf("a cell measured nothing")
	}
}

// A run over a unix socket measures the server's CPU time from /proc.
func TestRunOverUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floor.sock")
	l, err := srvconn.ListenUnix(path, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv := newFloorServer(io.Discard)
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	res, err := runLoad(context.Background(), loadSpec{Addr: "unix:" + path, ServerPID: os.Getpid(), Conns: 2,
		Keys: 100, Pick: pickRandom, Rcpts: 1, Duration: time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests == 0 || res.Errors != 0 {
		t.Fatalf("%d requests, %d errors (%v)", res.Requests, res.Errors, res.FirstErr)
	}
	cpu, ok := res.CPUPerRequest()
	t.Logf("%d requests, %s CPU each (client and server)", res.Requests, cpu)
	if !ok || cpu <= 0 {
		t.Errorf("CPU per request %s, measured %v", cpu, ok)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, 1000 * time.Microsecond}} {
		got := h.quantile(tc.q)
		if d := got - tc.want; d < -tc.want/64 || d > tc.want/64 {
			t.Errorf("quantile(%v) = %s, want %s within 1/64", tc.q, got, tc.want)
		}
	}
	for v := uint64(0); v < 1<<20; v += 7 {
		if i := bucketOf(v); bucketOf(bucketValue(i)) != i {
			t.Fatalf("value %d: bucket %d, whose value %d is in bucket %d", v, i, bucketValue(i), bucketOf(bucketValue(i)))
		}
	}
}

// The daemon's configuration is valid and carries the default limit
// stack on the given port.
func TestDaemonConfig(t *testing.T) {
	_, f, err := daemonConfig("127.0.0.1:12345", "/tmp/x/policy.sock", t.TempDir(), "info", time.Second, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Limits) != 2 || len(f.Server.PolicyListen) != 2 || f.Server.PolicyListen[0] != "127.0.0.1:12345" ||
		f.Server.PolicyListen[1] != "unix:/tmp/x/policy.sock" || *f.Server.MetricsListen != "" {
		t.Errorf("limits %d, listen %q, metrics %q", len(f.Limits), f.Server.PolicyListen, *f.Server.MetricsListen)
	}
	t.Log(describeLimits(f))
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--conns", "2, 4", "--keys", "100_000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.conns) != 2 || o.conns[1] != 4 || o.keys[0] != 100000 {
		t.Errorf("conns %v keys %v", o.conns, o.keys)
	}
	for _, bad := range [][]string{{"--conns", "0"}, {"--listeners", "udp"}, {"--rss-restart"}, {"--pick", "x"}, {"--addr", "x:1", "--rss-users", "5"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// The target lines print a ratio with enough decimals to tell it from the
// target: rounded to two decimals, a ratio of 0.4988 printed
// "throughput 0.50 >= 0.50 MISS".
func TestAgainst(t *testing.T) {
	for _, c := range []struct {
		v, target float64
		want      string
	}{
		{50416.0 / 101072.0, 0.50, "0.499"},
		{0.52, 0.50, "0.52"},
		{0.5, 0.5, "0.50"},
		{1.2004, 1.2, "1.2004"},
		{1.26, 1.2, "1.26"},
		{0.9 + 1e-9, 0.9, "0.900000"},
	} {
		if got := against(c.v, c.target); got != c.want {
			t.Errorf("against(%v, %v) = %q, want %q", c.v, c.target, got, c.want)
		}
	}
}
