package maillog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// collector gathers a Follower's lines and last position.
type collector struct {
	mu    sync.Mutex
	lines []string
	pos   Position
}

func (c *collector) add(line []byte, p Position) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, string(line))
	c.pos = p
}

// waitFor waits until c has n lines (or fails after a generous deadline).
func (c *collector) waitFor(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		got := len(c.lines)
		c.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %d lines; have %d", n, len(c.lines))
}

func appendLines(t *testing.T, path string, from, to int, tail string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := from; i < to; i++ {
		fmt.Fprintf(f, "line %d\n", i)
	}
	f.WriteString(tail)
}

func run(f *Follower, pos Position, c *collector) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Follow(ctx, pos, c.add) }()
	return func() { cancel(); <-done }
}

func want(from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("line %d", i))
	}
	return out
}

// endOf returns the position the zero Position starts f at: its end.
func endOf(t *testing.T, f *Follower) Position {
	t.Helper()
	file, pos, err := f.start(Position{}, func([]byte, Position) { t.Error("a line before the start was read") })
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if fi, _ := file.Stat(); pos.Offset != fi.Size() || pos.Ino == 0 {
		t.Fatalf("the zero Position starts at %+v, not the end (%d bytes)", pos, fi.Size())
	}
	return pos
}

// TestFollowerAcrossRotationAndRestart: lines written before the first
// start are skipped; then every line is read once, through a partial
// line, a rotation by rename, a truncation, a restart from the saved
// position and a rotation while stopped.
func TestFollowerAcrossRotationAndRestart(t *testing.T) {
	for round := range 3 {
		dir := t.TempDir()
		path := filepath.Join(dir, "mail.log")
		appendLines(t, path, -5, 0, "")
		f := &Follower{Path: path, Poll: time.Duration(round+1) * 3 * time.Millisecond}
		c := &collector{}
		stop := run(f, endOf(t, f), c)
		appendLines(t, path, 0, 10, "line 1")
		c.waitFor(t, 10)
		appendLines(t, path, 0, 0, "0\n") // completes "line 10"
		c.waitFor(t, 11)
		appendLines(t, path, 11, 15, "") // read before the rename or after it, from the old file
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		appendLines(t, path, 15, 20, "")
		c.waitFor(t, 20)
		if err := os.Truncate(path, 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		appendLines(t, path, 20, 22, "")
		c.waitFor(t, 22)
		stop()

		// Stopped: more lines, then a rotation, then more lines.
		appendLines(t, path, 22, 25, "")
		os.Rename(path, path+".1")
		appendLines(t, path, 25, 30, "")
		stop = run(f, c.pos, c)
		c.waitFor(t, 30)
		stop()
		if !slices.Equal(c.lines, want(0, 30)) {
			t.Fatalf("round %d: lines\n%q\nwant\n%q", round, c.lines, want(0, 30))
		}
	}
}

func TestPositionRoundTrip(t *testing.T) {
	p := Position{Dev: 7, Ino: 1 << 40, Offset: 12345}
	b, _ := p.MarshalBinary()
	var q Position
	if err := q.UnmarshalBinary(b); err != nil || q != p {
		t.Fatalf("round trip: %+v, %v", q, err)
	}
	if err := q.UnmarshalBinary(b[:5]); err == nil {
		t.Error("a short position decoded")
	}
}

// TestFollowerReadsALogCreatedLater whole: a Follow that found no log
// goes on from the position "start of the log" (Offset -1), so the lines
// written before it looks again are not skipped.
func TestFollowerReadsALogCreatedLater(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mail.log")
	c := &collector{}
	stop := run(&Follower{Path: path, Poll: 5 * time.Millisecond}, Position{Offset: -1}, c)
	defer stop()
	appendLines(t, path, 0, 3, "")
	c.waitFor(t, 3)
	if !slices.Equal(c.lines, want(0, 3)) {
		t.Fatalf("lines %q", c.lines)
	}
}
