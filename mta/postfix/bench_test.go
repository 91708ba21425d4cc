package postfix

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// BenchmarkReadRequest decodes the 31-attribute RCPT request Postfix 3.8
// sends, with a reused Decoder as on a server connection.
func BenchmarkReadRequest(b *testing.B) {
	in := transcript(b, "rcpt.txt")
	r := bytes.NewReader(in)
	br := bufio.NewReader(r)
	dec := NewDecoder(br)
	var req policy.Request
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(in)
		br.Reset(r)
		if err := dec.Decode(&req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteReply(b *testing.B) {
	for _, bc := range []struct {
		name string
		d    policy.Decision
	}{
		{"pass", policy.Decision{}},
		{"defer", policy.Decision{Action: policy.Defer, Text: "Rate limit exceeded for alice (210/200 per hour), try again later"}},
		{"prepend", policy.Decision{Action: policy.Warn, Header: "X-Rate-Limit: user_hourly 210/200"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := bufio.NewWriter(io.Discard)
			b.ReportAllocs()
			for b.Loop() {
				if err := WriteReply(w, bc.d, policy.StateRcpt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkServerRoundTrip measures one request and reply over a loopback
// TCP connection, Decide included (a no-op).
func BenchmarkServerRoundTrip(b *testing.B) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &Server{Decider: mta.DeciderFunc(func(_ context.Context, _ *policy.Request) policy.Decision {
		return policy.Decision{}
	}), Logger: slog.New(slog.DiscardHandler)}
	go srv.Serve(l)
	defer srv.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	in := transcript(b, "rcpt.txt")
	br := bufio.NewReader(c)
	reply := make([]byte, len("action=DUNNO\n\n"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(in); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(br, reply); err != nil {
			b.Fatal(err)
		}
	}
}
