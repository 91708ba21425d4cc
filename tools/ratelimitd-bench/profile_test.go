package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/mta/postfix"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/ratestore"
	"github.com/ratelimitd/ratelimitd/statedb"
)

var inuseProfile = flag.String("inuse", "", "BenchmarkInProcessDaemon: write a heap profile of the running daemon parts (after the final flush and a GC) to this file, prefixed with the sub-benchmark name")

// BenchmarkInProcessDaemon runs the load generator against ratelimitd's
// parts wired in this process the way cmd/ratelimitd's startDaemon wires
// them (default limit stack, sharded memory store with BoltDB write-behind
// every second, mta/postfix.Server; without the daemon's Prometheus
// metrics and log lines), so that the profiling flags of go test show
// where the daemon's time and memory go:
//
//	go test -run '^$' -bench InProcess -benchtime 1x -cpuprofile cpu.out -memprofile mem.out ./ratelimitd-bench
//
// The client shares the process (and its profile: the connection
// goroutines of runLoad are main.(*worker) frames). Each sub-benchmark is
// one run whatever b.N; it reports requests/s, the heap the process held
// at the end of the load, and the live heap after a final flush and a GC
// (-inuse FILE writes its profile, with the daemon still running).
func BenchmarkInProcessDaemon(b *testing.B) {
	for _, bc := range []struct {
		name string
		spec loadSpec
	}{
		{"C64-K100000", loadSpec{Conns: 64, Keys: 100_000, Pick: pickRandom, Rcpts: 1, Warmup: time.Second, Duration: 5 * time.Second}},
		{"users1M", loadSpec{Conns: 64, Distinct: 1_000_000, Duration: 5 * time.Minute}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				addr, p, stop := startInProcessDaemon(b)
				spec := bc.spec
				spec.Addr = addr
				res, err := runLoad(context.Background(), spec)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.Flush(); err != nil {
					b.Fatal(err)
				}
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak := ms.HeapSys - ms.HeapReleased
				runtime.GC()
				runtime.ReadMemStats(&ms)
				if *inuseProfile != "" {
					writeHeapProfile(b, filepath.Join(filepath.Dir(*inuseProfile), bc.name+"-"+filepath.Base(*inuseProfile)))
				}
				b.ReportMetric(res.Rate(), "req/s")
				b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
				b.ReportMetric(float64(peak)/(1<<20), "heap-held-MiB")
				b.ReportMetric(float64(p.Memory().Len()), "states")
				stop()
			}
		})
	}
}

// startInProcessDaemon starts the daemon's parts on 127.0.0.1:0.
func startInProcessDaemon(b *testing.B) (string, *ratestore.Persistent, func()) {
	b.Helper()
	engine, p, stopEngine := newInProcessEngine(b)
	srv := newFloorServer(io.Discard)
	srv.Decider = mta.DeciderFunc(func(ctx context.Context, req *policy.Request) policy.Decision {
		return engine.Evaluate(ctx, time.Now(), req)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l)
	return l.Addr().String(), p, func() {
		srv.Close()
		stopEngine()
	}
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRequestPath is one policy request through the daemon's request
// path without the socket: decode (mta/postfix.Decoder, reused as on a
// connection), decide (policy.Engine.Decide with the default limit stack
// over the persistent store, as cmd/ratelimitd wires it; the write-behind
// flush runs every second in the background) and the reply
// (mta/postfix.WriteReply into a reused buffered writer). Each message is
// one RCPT and one END-OF-MESSAGE request, with a new instance and queue
// ID, of a user taken round robin from 100,000 ("decode+decide+reply") or
// from the 4,096 messages decoded up front ("decide+reply"), 50 ms apart
// on the engine's clock, so that no message is refused however many
// requests the run makes.
//
// "decide+reply" starts from decoded requests; "decode+decide+reply"
// decodes each. allocs/req counts every allocation of the process during
// the run divided by the requests, background flushes included, with
// decimals (allocs/op rounds down).
func BenchmarkRequestPath(b *testing.B) {
	const messageEvery = 50 * time.Millisecond
	const users = 100_000
	for _, decode := range []bool{false, true} {
		name := "decide+reply"
		if decode {
			name = "decode+decide+reply"
		}
		b.Run(name, func(b *testing.B) {
			engine, _, stop := newInProcessEngine(b)
			defer stop()
			m := newMessage(1, 1)
			in := bytes.NewReader(nil)
			br := bufio.NewReader(in)
			dec := postfix.NewDecoder(br)
			bw := bufio.NewWriterSize(io.Discard, postfix.MaxReplyLen+2)
			ctx := context.Background()
			decodeReq := func(raw []byte, req *policy.Request) {
				in.Reset(raw)
				br.Reset(in)
				if err := dec.Decode(req); err != nil {
					b.Fatal(err)
				}
			}
			// Without decoding: 4096 messages decoded up front, each
			// sent again (a new message: its END-OF-MESSAGE forgot it)
			// by another user every 4096 messages.
			var pre [][2]policy.Request
			if !decode {
				pre = make([][2]policy.Request, 4096)
				for i := range pre {
					m.next(i, uint64(i))
					decodeReq(m.rcpt.b, &pre[i][0])
					decodeReq(m.eom.b, &pre[i][1])
				}
			}
			var req policy.Request
			now := time.Now()
			seq := uint64(0)
			step := func(i int) {
				if i%2 == 0 {
					// A message every 50 ms of the engine's
					// clock: a user of the 4096 sends one
					// every 205 s (17.6 an hour, 421 a day),
					// so that however long the run, no
					// message goes over a limit (a refusal
					// formats its reply: allocations).
					now = now.Add(messageEvery)
				}
				var r *policy.Request
				switch {
				case decode && i%2 == 0:
					seq++
					m.next(int(seq%users), seq)
					decodeReq(m.rcpt.b, &req)
					r = &req
				case decode:
					decodeReq(m.eom.b, &req)
					r = &req
				default:
					p := &pre[(i/2)%len(pre)][i%2]
					r = p
				}
				d := engine.Evaluate(ctx, now, r)
				if err := postfix.WriteReply(bw, d, r.ProtocolState); err != nil {
					b.Fatal(err)
				}
			}
			for i := range 4 * users {
				step(i)
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mallocs := ms.Mallocs
			b.ReportAllocs()
			b.ResetTimer()
			n := 0
			for i := 0; b.Loop(); i++ {
				step(i)
				n++
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(ms.Mallocs-mallocs)/float64(n), "allocs/req")
		})
	}
}

// newInProcessEngine is the daemon's engine over a persistent store in a
// temporary BoltDB file, flushing every second until stop.
func newInProcessEngine(b *testing.B) (*policy.Engine, *ratestore.Persistent, func()) {
	b.Helper()
	_, f, err := daemonConfig("127.0.0.1:0", "", b.TempDir(), "info", time.Second, "", true)
	if err != nil {
		b.Fatal(err)
	}
	db, err := bolt.Open(filepath.Join(b.TempDir(), "ratelimitd.db"), 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	mem := ratestore.NewMemory(ratestore.MemoryOptions{MaxKeys: f.Server.MaxKeys})
	pc := f.PolicyConfig()
	pc.OmitMeasures = true
	limits, err := policy.LimitParams(pc)
	if err != nil {
		b.Fatal(err)
	}
	p, err := ratestore.NewPersistent(db, mem, ratestore.PersistOptions{Limits: limits})
	if err != nil {
		b.Fatal(err)
	}
	engine, err := policy.NewEngine(pc, p)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	flusher := statedb.NewFlusher(time.Duration(f.Server.FlushInterval), nil, nil)
	flusher.Add("rate state", p.Tick)
	go func() {
		flusher.Run(ctx)
		close(ran)
	}()
	return engine, p, func() {
		cancel()
		<-ran
		p.Close()
		db.Close()
	}
}
