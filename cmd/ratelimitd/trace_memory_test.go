package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeSyntheticMaillog writes a Postfix log of about lines lines in
// classic syslog form, a month long from 1 November: messages of one to
// three recipients from 500 SASL users, four sessions at a time with
// their lines interleaved, 2% deferred and delivered half an hour later,
// 1% sessions that end before the message is complete (client= only, no
// "removed"). Each message has connect, client=, message-id=, from=, one
// to= per recipient, removed and disconnect lines.
func writeSyntheticMaillog(t testing.TB, path string, lines int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, uint64(lines)))
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	step := 30 * 24 * time.Hour / time.Duration(max(lines, 1))
	type msg struct {
		id, user       string
		pid            int
		at             time.Time
		lines          []string
		next           int
		deferredTo     string
		deferredUntil  time.Time
		deferredRemove string
	}
	stamp := func(t time.Time) string { return t.Format(time.StampMicro) }
	var open []*msg
	var later []*msg
	n, seq := 0, 0
	now := start
	write := func(s string) {
		w.WriteString(stamp(now))
		w.WriteString(" mx1 ")
		w.WriteString(s)
		w.WriteByte('\n')
		n++
	}
	for n < lines {
		now = now.Add(step)
		for len(open) < 4 {
			seq++
			m := &msg{id: fmt.Sprintf("%010X", seq*7919), user: fmt.Sprintf("user%03d", rng.IntN(500)), pid: 1000 + rng.IntN(9000), at: now}
			ip := fmt.Sprintf("192.0.2.%d", 1+rng.IntN(250))
			m.lines = append(m.lines,
				fmt.Sprintf("postfix/submission/smtpd[%d]: connect from client.example.org[%s]", m.pid, ip),
				fmt.Sprintf("postfix/submission/smtpd[%d]: %s: client=client.example.org[%s], sasl_method=PLAIN, sasl_username=%s", m.pid, m.id, ip, m.user))
			if rng.IntN(100) == 0 {
				m.lines = append(m.lines, fmt.Sprintf("postfix/submission/smtpd[%d]: disconnect from client.example.org[%s] ehlo=1 auth=1 mail=1 rcpt=1 data=0/1 quit=1 commands=5/6", m.pid, ip))
				open = append(open, m)
				continue
			}
			k := 1 + rng.IntN(3)
			m.lines = append(m.lines,
				fmt.Sprintf("postfix/cleanup[%d]: %s: message-id=<%d.%s@example.org>", m.pid+1, m.id, seq, m.user),
				fmt.Sprintf("postfix/qmgr[900]: %s: from=<%s@example.org>, size=%d, nrcpt=%d (queue active)", m.id, m.user, 1000+rng.IntN(100000), k),
				fmt.Sprintf("postfix/submission/smtpd[%d]: disconnect from client.example.org[%s] ehlo=1 auth=1 mail=1 rcpt=%d data=1 quit=1 commands=%d", m.pid, ip, k, 5+k))
			for r := 0; r < k; r++ {
				to := fmt.Sprintf("postfix/smtp[%d]: %s: to=<rcpt%d@example.net>, relay=mx.example.net[198.51.100.1]:25, delay=1.2, delays=0.1/0/0.5/0.6, dsn=2.0.0, status=sent (250 2.0.0 Ok: queued as 3F2A1)", m.pid+2, m.id, rng.IntN(100000))
				if r == 0 && rng.IntN(50) == 0 {
					m.deferredTo = to
					to = fmt.Sprintf("postfix/smtp[%d]: %s: to=<slow@example.com>, relay=none, delay=5, delays=0/0/5/0, dsn=4.4.1, status=deferred (connect to mx.example.com[198.51.100.2]:25: Connection refused)", m.pid+2, m.id)
				}
				m.lines = append(m.lines, to)
			}
			if m.deferredTo == "" {
				m.lines = append(m.lines, fmt.Sprintf("postfix/qmgr[900]: %s: removed", m.id))
			} else {
				m.deferredUntil = now.Add(30 * time.Minute)
				m.deferredRemove = fmt.Sprintf("postfix/qmgr[900]: %s: removed", m.id)
			}
			open = append(open, m)
		}
		i := rng.IntN(len(open))
		m := open[i]
		write(m.lines[m.next])
		m.next++
		if m.next == len(m.lines) {
			open = append(open[:i], open[i+1:]...)
			if m.deferredTo != "" {
				later = append(later, m)
			}
		}
		for len(later) > 0 && !later[0].deferredUntil.After(now) {
			write(later[0].deferredTo)
			write(later[0].deferredRemove)
			later = later[1:]
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// traceFromMaillogRSS runs "trace from-maillog" on log in a subprocess
// and returns its peak resident memory (VmHWM, read from /proc every 5 ms
// until it exits: the rusage of a child counts the parent's memory from
// before the exec) and run time.
func traceFromMaillogRSS(t *testing.T, log string) (rssMB float64, took time.Duration, summary string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "month.trace")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1",
		"RATELIMITD_ARGS=trace from-maillog --tz UTC --log-end 2026-12-01T00:00:00Z -o "+out+" "+log)
	var text bytes.Buffer
	cmd.Stdout, cmd.Stderr = &text, &text
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	var kb int
	for {
		select {
		case err := <-done:
			took = time.Since(begin)
			if err != nil {
				t.Fatalf("%v\n%s", err, text.String())
			}
			return float64(kb) / 1024, took, text.String()
		case <-time.After(5 * time.Millisecond):
			data, err := os.ReadFile(status)
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(data), "\n") {
				if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
					if n, err := strconv.Atoi(f[1]); err == nil && n > kb {
						kb = n
					}
				}
			}
		}
	}
}

// TestTraceFromMaillogMemoryBounded: "trace from-maillog" on a Postfix
// log four times as long needs about the same memory: it streams,
// holding the messages open at a time, not the log's (before: 72 MB for
// 196,000 lines, 293 MB for 1.57 million). RATELIMITD_MAILLOG_LINES sets
// the longer log's length (the figure in docs/performance.md is for
// 1,500,000 lines).
func TestTraceFromMaillogMemoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and reads logs of 100,000 and 400,000 lines")
	}
	long := 400_000
	if s := os.Getenv("RATELIMITD_MAILLOG_LINES"); s != "" {
		var err error
		if long, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	var rss []float64
	for _, lines := range []int{long / 4, long} {
		log := filepath.Join(dir, fmt.Sprintf("mail-%d.log", lines))
		writeSyntheticMaillog(t, log, lines)
		mb, took, summary := traceFromMaillogRSS(t, log)
		fi, _ := os.Stat(log)
		begin := time.Now()
		if out, err := exec.Command("wc", "-l", log).Output(); err == nil {
			t.Logf("wc -l: %s in %v", strings.TrimSpace(string(out)), time.Since(begin).Round(time.Millisecond))
		}
		t.Logf("%d lines (%.0f MB): peak RSS %.1f MB, %v\n%s", lines, float64(fi.Size())/1e6, mb, took.Round(time.Millisecond), summary)
		rss = append(rss, mb)
	}
	if rss[1] > 100 || rss[1] > 1.5*rss[0]+10 {
		t.Fatalf("peak RSS %.1f MB for %d lines, %.1f MB for a quarter of them: memory grows with the log", rss[1], long, rss[0])
	}
}

// TestWriteSyntheticMaillog writes the synthetic log of
// TestTraceFromMaillogMemoryBounded to the file RATELIMITD_WRITE_MAILLOG
// names (RATELIMITD_MAILLOG_LINES lines, default 1,500,000), to measure
// by hand: /usr/bin/time -v ratelimitd trace from-maillog -o /dev/null FILE.
func TestWriteSyntheticMaillog(t *testing.T) {
	path := os.Getenv("RATELIMITD_WRITE_MAILLOG")
	if path == "" {
		t.Skip("set RATELIMITD_WRITE_MAILLOG=FILE")
	}
	lines := 1_500_000
	if s := os.Getenv("RATELIMITD_MAILLOG_LINES"); s != "" {
		var err error
		if lines, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	writeSyntheticMaillog(t, path, lines)
}
