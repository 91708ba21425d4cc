package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Ways of choosing the user of each message (loadSpec.Pick).
const (
	pickRandom     = "random"     // uniform over the K users
	pickRoundRobin = "roundrobin" // every user in turn
)

// loadSpec is one measured run against one policy server.
type loadSpec struct {
	// Addr is the policy server: host:port (TCP) or unix:/path.
	Addr string
	// ServerPID, if > 0, is the server's process id: its CPU time over
	// the measured window is read from /proc (result.CPUTicks).
	ServerPID int
	// Conns is the number of persistent connections, each synchronous
	// like a Postfix smtpd process: one request, wait for its reply.
	Conns int
	// Keys is the number of distinct users; Pick how each message's
	// user is chosen.
	Keys int
	Pick string
	// Rcpts is how many RCPT requests precede each message's
	// END-OF-MESSAGE request (0: END-OF-MESSAGE only).
	Rcpts int
	// Warmup is run first and not measured; then the run is measured for
	// Duration or until MaxRequests requests were measured (0: no count
	// limit), whichever comes first.
	Warmup, Duration time.Duration
	MaxRequests      int64
	// Distinct, if > 0, replaces Keys/Pick/Rcpts/Warmup: users
	// 0..Distinct-1 each send one END-OF-MESSAGE request, spread over the
	// connections, and the run ends when all are answered (or Duration
	// has passed).
	Distinct int
	// Seed seeds the random user choice.
	Seed uint64
	// IOTimeout bounds each connection's I/O beyond the planned end of
	// the run.
	IOTimeout time.Duration
}

// result is what a run measured.
type result struct {
	Requests int64         // requests answered within the measured window
	Elapsed  time.Duration // length of the measured window
	Hist     histogram     // their latencies (request written to reply read)
	Refused  int64         // replies other than DUNNO among them
	Errors   int64         // connections that failed
	FirstErr error
	// CPUTicks is the server's user+system CPU time over the measured
	// window, in clock ticks (/proc/PID/stat); CPUOK is false when it
	// could not be read.
	CPUTicks int64
	CPUOK    bool
	runs     int // runs added (add)
}

// add accumulates o into r (runs of one cell).
func (r *result) add(o *result) {
	r.Requests += o.Requests
	r.Elapsed += o.Elapsed
	r.Hist.merge(&o.Hist)
	r.Refused += o.Refused
	r.Errors += o.Errors
	if r.FirstErr == nil {
		r.FirstErr = o.FirstErr
	}
	r.CPUTicks += o.CPUTicks
	r.CPUOK = o.CPUOK && (r.runs == 0 || r.CPUOK)
	r.runs++
}

// CPUPerRequest is the server's CPU time per measured request; ok is false
// when it was not measured.
func (r *result) CPUPerRequest() (time.Duration, bool) {
	if !r.CPUOK || r.Requests == 0 {
		return 0, false
	}
	return time.Duration(r.CPUTicks) * tickDuration / time.Duration(r.Requests), true
}

// Rate is the throughput in requests per second.
func (r *result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// Phases of a run, read by every connection before each request.
const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// worker is one connection's state and counts.
type worker struct {
	id      int
	conn    net.Conn
	br      *bufio.Reader
	msg     *message
	rng     *rand.Rand
	seq     uint64
	next    int // next user, for round robin and Distinct
	hist    histogram
	n       int64
	refused int64
	err     error
}

// runLoad performs spec. It returns an error if a connection cannot be
// opened or ctx is cancelled; failures of connections during the run are
// counted in the result. It always returns within Warmup + Duration plus
// IOTimeout plus a few seconds.
func runLoad(ctx context.Context, spec loadSpec) (*result, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	ws, err := dialWorkers(ctx, &spec)
	if err != nil {
		return nil, err
	}
	defer closeWorkers(ws)
	return drive(ctx, &spec, ws)
}

// check validates spec and fills in its defaults.
func (spec *loadSpec) check() error {
	if spec.Conns < 1 {
		return errors.New("conns must be at least 1")
	}
	if spec.Distinct == 0 && (spec.Keys < 1 || spec.Keys > maxUsers) {
		return fmt.Errorf("keys must be 1..%d", maxUsers)
	}
	if spec.Distinct > maxUsers {
		return fmt.Errorf("distinct users must be at most %d", maxUsers)
	}
	if spec.IOTimeout <= 0 {
		spec.IOTimeout = 10 * time.Second
	}
	if spec.Distinct > 0 {
		spec.Warmup = 0
	}
	return nil
}

// closeWorkers closes the connections of ws (nil entries skipped).
func closeWorkers(ws []*worker) {
	for _, w := range ws {
		if w != nil {
			w.conn.Close()
		}
	}
}

// dialWorkers opens spec.Conns connections to the server, each with a
// deadline past the whole run.
func dialWorkers(ctx context.Context, spec *loadSpec) ([]*worker, error) {
	ws := make([]*worker, spec.Conns)
	d := net.Dialer{Timeout: 5 * time.Second}
	ioDeadline := time.Now().Add(spec.Warmup + spec.Duration + spec.IOTimeout + 5*time.Second)
	network, addr := "tcp", spec.Addr
	if path, ok := strings.CutPrefix(spec.Addr, "unix:"); ok {
		network, addr = "unix", path
	}
	for i := range ws {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			closeWorkers(ws)
			return nil, fmt.Errorf("connect %s: %w", spec.Addr, err)
		}
		c.SetDeadline(ioDeadline)
		ws[i] = &worker{
			id: i, conn: c, br: bufio.NewReader(c), msg: newMessage(i, max(spec.Rcpts, 1)),
			rng:  rand.New(rand.NewPCG(spec.Seed, uint64(i))),
			next: i,
		}
	}
	return ws, nil
}

// drive runs the workers: warm-up, then the measured phase until the
// duration has passed or enough requests were measured, then collects
// their counts and the server's CPU time.
func drive(ctx context.Context, spec *loadSpec, ws []*worker) (*result, error) {
	closeAll := func() { closeWorkers(ws) }
	var phase atomic.Int32
	var measured atomic.Int64
	var wg sync.WaitGroup
	allDone := make(chan struct{})
	if spec.Warmup <= 0 {
		phase.Store(phaseMeasure)
	}
	start := time.Now()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(spec, &phase, &measured)
		}()
	}
	go func() {
		wg.Wait()
		close(allDone)
	}()

	// Warm up, then measure until the duration has passed, enough
	// requests were measured, every worker is done, or ctx ends.
	wait := func(d time.Duration, stopAt int64) {
		t := time.NewTimer(d)
		defer t.Stop()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-t.C:
				return
			case <-allDone:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if stopAt > 0 && measured.Load() >= stopAt {
					return
				}
			}
		}
	}
	cpu := func() int64 { return -1 }
	if spec.ServerPID > 0 {
		cpu = func() int64 {
			if t, ok := cpuTicks(spec.ServerPID); ok {
				return t
			}
			return -1
		}
	}
	var cpu0 int64
	if spec.Warmup > 0 {
		wait(spec.Warmup, 0)
		cpu0 = cpu()
		phase.Store(phaseMeasure)
		start = time.Now()
	} else {
		cpu0 = cpu()
	}
	wait(spec.Duration, spec.MaxRequests)
	phase.Store(phaseStop)
	elapsed := time.Since(start)
	cpu1 := cpu()

	// The workers finish the request in flight; a server that does not
	// answer is cut off.
	select {
	case <-allDone:
	case <-time.After(spec.IOTimeout):
		closeAll()
		<-allDone
	case <-ctx.Done():
		closeAll()
		<-allDone
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &result{Elapsed: elapsed}
	if cpu0 >= 0 && cpu1 >= cpu0 {
		r.CPUTicks, r.CPUOK = cpu1-cpu0, true
	}
	for _, w := range ws {
		r.Requests += w.n
		r.Refused += w.refused
		r.Hist.merge(&w.hist)
		if w.err != nil {
			r.Errors++
			if r.FirstErr == nil {
				r.FirstErr = fmt.Errorf("connection %d: %w", w.id, w.err)
			}
		}
	}
	return r, nil
}

// run sends messages until the phase is phaseStop, or until its share of
// the Distinct users is done.
func (w *worker) run(spec *loadSpec, phase *atomic.Int32, measured *atomic.Int64) {
	for {
		var user int
		switch {
		case spec.Distinct > 0:
			if w.next >= spec.Distinct {
				return
			}
			user = w.next
			w.next += spec.Conns
		case spec.Pick == pickRoundRobin:
			user = w.next % spec.Keys
			w.next = (w.next + spec.Conns) % spec.Keys
		default:
			user = w.rng.IntN(spec.Keys)
		}
		w.seq++
		w.msg.next(user, w.seq)
		if spec.Distinct == 0 {
			for range spec.Rcpts {
				if !w.request(w.msg.rcpt.b, phase, measured) {
					return
				}
			}
		}
		if !w.request(w.msg.eom.b, phase, measured) {
			return
		}
	}
}

// request sends one request and reads its reply, recording it if the
// whole exchange fell within the measured window. It reports whether the
// worker should go on.
func (w *worker) request(req []byte, phase *atomic.Int32, measured *atomic.Int64) bool {
	ph := phase.Load()
	if ph == phaseStop {
		return false
	}
	t0 := time.Now()
	if _, err := w.conn.Write(req); err != nil {
		w.fail(err, phase)
		return false
	}
	dunno, err := readReply(w.br)
	if err != nil {
		w.fail(err, phase)
		return false
	}
	took := time.Since(t0)
	if ph == phaseMeasure && phase.Load() == phaseMeasure {
		w.hist.record(took)
		w.n++
		if !dunno {
			w.refused++
		}
		measured.Add(1)
	}
	return true
}

// fail records err unless the run was stopping anyway.
func (w *worker) fail(err error, phase *atomic.Int32) {
	if phase.Load() != phaseStop {
		w.err = err
	}
}

// maxReplyLines bounds the lines read for one reply.
const maxReplyLines = 16

var dunnoLine = []byte("action=DUNNO\n")

// readReply reads one policy reply ("action=...\n" then an empty line) and
// reports whether it was DUNNO.
func readReply(br *bufio.Reader) (dunno bool, err error) {
	for i := range maxReplyLines {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == bufio.ErrBufferFull {
				return false, errors.New("reply line too long")
			}
			return false, err
		}
		if i == 0 {
			if !bytes.HasPrefix(line, []byte("action=")) {
				return false, fmt.Errorf("reply %.40q does not start with action=", line)
			}
			dunno = bytes.Equal(line, dunnoLine)
			continue
		}
		if len(line) == 1 || (len(line) == 2 && line[0] == '\r') {
			return dunno, nil
		}
	}
	return false, fmt.Errorf("reply longer than %d lines", maxReplyLines)
}
