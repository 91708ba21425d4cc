package milter

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestFreezeMemoryEightConcurrent50MB freezes eight 50 MB messages at
// once over real milter sessions on a unix socket into a real quarantine
// (BoltDB, each chunk and each entry committed and fsync'd), and samples
// the Go heap (runtime/metrics /gc/heap/live:bytes, live at the last
// collection, and /memory/classes/heap/objects:bytes) and the anonymous
// resident memory (/proc/self/status RssAnon) every 5 ms. Freezing
// streams each message from its spool file into the store in
// quarantine.ChunkSize pieces, so the live heap's peak above the idle
// baseline stays within eight times (spool threshold + 1 MiB) plus 8 MiB
// (the milter sessions, bbolt's pages of one transaction); reading whole
// messages into memory, as freezing did, peaks at about 3 x 400 MB. The
// figures are logged (go test -run TestFreezeMemory -v ./mta/milter).
func TestFreezeMemoryEightConcurrent50MB(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 400 MB to a BoltDB file")
	}
	const (
		n    = 8
		size = 50 << 20
	)
	dir := t.TempDir()
	qs := openQuarantine(t, filepath.Join(dir, "ratelimitd.db"))
	srv := freezingServer(qs)
	srv.MaxMessageSize, srv.SpoolDir = size+1<<20, dir
	l, err := net.Listen("unix", filepath.Join(dir, "milter.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	runtime.GC()
	base := heapObjects()
	baseAnon := rssAnon()
	baseLive := heapLive()
	var peak, peakLive, peakAnon atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if h := heapObjects(); h > peak.Load() {
				peak.Store(h)
			}
			if h := heapLive(); h > peakLive.Load() {
				peakLive.Store(h)
			}
			if a := rssAnon(); a > peakAnon.Load() {
				peakAnon.Store(a)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	// Each client sends its 50 MB from one 64 KiB line block, so the
	// clients' own memory stays small.
	block := bytes.Repeat([]byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd\r\n"), gomilter.MaxBodyChunk/64)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- sendLarge(l.Addr().String(), "user"+strconv.Itoa(i), block, size)
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	es, err := qs.List(quarantine.Filter{})
	if err != nil || len(es) != n {
		t.Fatalf("%d frozen entries, %v", len(es), err)
	}
	for _, e := range es {
		if e.Size < size {
			t.Errorf("%s frozen with %d bytes", e.ID, e.Size)
		}
	}
	// The stored message is whole and matches its SHA-256 (as on thaw).
	if msg, err := qs.Message(es[0].ID); err != nil || int64(len(msg)) != es[0].Size {
		t.Fatalf("message of %s: %d bytes, %v", es[0].ID, len(msg), err)
	}

	grew, live := peak.Load()-base, peakLive.Load()-baseLive
	t.Logf("8 x 50 MB frozen concurrently: live heap peak %.1f MiB above idle (%.2f MiB per message); Go heap objects "+
		"(with unswept garbage) peak %.1f MiB above idle; anonymous RSS peak %.1f MiB (idle %.1f MiB); "+
		"spool threshold %d KiB, chunk %d KiB",
		mib(live), mib(live)/n, mib(grew), mib(peakAnon.Load()), mib(baseAnon), srv.spoolThreshold>>10, quarantine.ChunkSize>>10)
	if limit := int64(n)*(srv.spoolThreshold+quarantine.ChunkSize) + 8<<20; live > limit {
		t.Errorf("live heap grew by %.1f MiB freezing 8 x 50 MB, want at most %.1f MiB", mib(live), mib(limit))
	}
}

// sendLarge sends one message of about size bytes (block repeated) as
// user through a new milter session and expects it to be discarded
// (frozen).
func sendLarge(addr, user string, block []byte, size int) error {
	c := gomilter.NewClientWithOptions("unix", addr, gomilter.ClientOptions{
		Dialer: &net.Dialer{Timeout: 5 * time.Second}, ReadTimeout: 120 * time.Second, WriteTimeout: 120 * time.Second,
		ActionMask: gomilter.OptAddHeader | gomilter.OptQuarantine,
	})
	defer c.Close()
	s, err := c.Session()
	if err != nil {
		return err
	}
	defer s.Close()
	steps := []func() (*gomilter.Action, error){
		func() (*gomilter.Action, error) {
			return s.Conn("client.example.com", gomilter.FamilyInet, 41000, "192.0.2.7")
		},
		func() (*gomilter.Action, error) { return s.Helo("client.example.com") },
		func() (*gomilter.Action, error) {
			if err := s.Macros(gomilter.CodeMail, "{auth_authen}", user); err != nil {
				return nil, err
			}
			return s.Mail(user+"@example.com", nil)
		},
		func() (*gomilter.Action, error) { return s.Rcpt("bob@example.org", nil) },
		func() (*gomilter.Action, error) { return s.HeaderField("Subject", "large "+user) },
		func() (*gomilter.Action, error) { return s.HeaderEnd() },
	}
	for _, step := range steps {
		if _, err := step(); err != nil {
			return err
		}
	}
	for sent := 0; sent < size; sent += len(block) {
		if _, err := s.BodyChunk(block); err != nil {
			return err
		}
	}
	_, act, err := s.End()
	if err != nil {
		return err
	}
	if act.Code != gomilter.ActDiscard {
		return &actionError{act}
	}
	return nil
}

type actionError struct{ act *gomilter.Action }

func (e *actionError) Error() string {
	return "end of message: action " + string(rune(e.act.Code)) + ", want discard"
}

// heapLive is the Go heap's live bytes as of the last garbage
// collection.
func heapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// heapObjects is the Go heap's bytes in objects, live or not yet swept.
func heapObjects() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// rssAnon is the process's anonymous resident memory (/proc/self/status
// RssAnon), 0 where there is none.
func rssAnon() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "RssAnon:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
