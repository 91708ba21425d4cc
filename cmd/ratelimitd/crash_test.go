package main

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gomilter "github.com/emersion/go-milter"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// crashDaemon runs the real daemon (this test binary re-executed) and lets
// the test SIGKILL it.
type crashDaemon struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	out *syncBuffer
}

func (c *crashDaemon) start(t *testing.T, cfgPath, milterAddr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "RATELIMITD_RUN_MAIN=1", "RATELIMITD_ARGS=serve --config "+cfgPath)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", milterAddr, time.Second); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatalf("daemon did not start:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.mu.Lock()
	c.cmd, c.out = cmd, out
	c.mu.Unlock()
}

func (c *crashDaemon) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		c.cmd.Process.Kill()
		c.cmd.Wait()
		c.cmd = nil
	}
}

func (c *crashDaemon) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmd != nil
}

// deliverOne plays one message through the milter as Postfix would and
// reports whether the daemon told the MTA to discard it (frozen).
func deliverOne(addr string, n int, body []byte) (discarded bool, err error) {
	cl := gomilter.NewClientWithOptions("tcp", addr, gomilter.ClientOptions{
		Dialer: &net.Dialer{Timeout: 2 * time.Second}, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		ActionMask: gomilter.OptAddHeader | gomilter.OptQuarantine,
	})
	s, err := cl.Session()
	if err != nil {
		return false, err
	}
	defer s.Close()
	if err := s.Macros(gomilter.CodeConn, "j", "mx.example.net"); err != nil {
		return false, err
	}
	if _, err := s.Conn("client.example.com", gomilter.FamilyInet, 41000, "192.0.2.7"); err != nil {
		return false, err
	}
	if _, err := s.Helo("client.example.com"); err != nil {
		return false, err
	}
	if err := s.Macros(gomilter.CodeMail, "{auth_authen}", "mallory", "{mail_addr}", "mallory@example.org"); err != nil {
		return false, err
	}
	if _, err := s.Mail("mallory@example.org", nil); err != nil {
		return false, err
	}
	if _, err := s.Rcpt("victim@example.net", nil); err != nil {
		return false, err
	}
	for _, h := range [][2]string{{"From", "mallory@example.org"}, {"To", "victim@example.net"}, {"Subject", fmt.Sprintf("offer %d", n)}} {
		if _, err := s.HeaderField(h[0], h[1]); err != nil {
			return false, err
		}
	}
	if _, err := s.HeaderEnd(); err != nil {
		return false, err
	}
	for chunk := range slices.Chunk(body, gomilter.MaxBodyChunk) {
		if _, err := s.BodyChunk(chunk); err != nil {
			return false, err
		}
	}
	if err := s.Macros(gomilter.CodeEOB, "i", fmt.Sprintf("Q%06d", n)); err != nil {
		return false, err
	}
	_, act, err := s.End()
	if err != nil {
		return false, err
	}
	return act.Code == gomilter.ActDiscard, nil
}

// TestCrashDuringFreezes kills the daemon with SIGKILL at random moments
// during 1,000 milter deliveries that freeze: after a restart, every
// message the MTA was told to discard is in the quarantine (checked by
// hash), and no entry is half-stored.
func TestCrashDuringFreezes(t *testing.T) {
	const deliveries = 1000
	dir := t.TempDir()
	mport := freePort(t)
	milterAddr := fmt.Sprintf("127.0.0.1:%d", mport)
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", freePort(t)), fmt.Sprintf(`
[milter]
listen = %q
[[limit]]
name = "one"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "freeze"
`, milterAddr))
	d := &crashDaemon{}
	d.start(t, cfgPath, milterAddr)
	t.Cleanup(d.kill)

	// The killer: SIGKILL at random moments, 20-250 ms apart.
	stop := make(chan struct{})
	kills := 0
	var killerDone sync.WaitGroup
	killerDone.Add(1)
	go func() {
		defer killerDone.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rand.IntN(230)) * time.Millisecond):
				if d.running() {
					d.kill()
					kills++
				}
			}
		}
	}()
	discarded := map[string]int{} // body hash -> delivery
	failed := 0
	for n := 1; n <= deliveries; n++ {
		body := []byte(fmt.Sprintf("Buy now, offer %d.\r\n%s\r\n", n, strings.Repeat(fmt.Sprintf("%d-", n), 1+rand.IntN(4000))))
		for {
			if !d.running() {
				d.start(t, cfgPath, milterAddr)
			}
			ok, err := deliverOne(milterAddr, n, body)
			if err != nil {
				failed++ // the daemon died mid-message: the MTA temp-fails and retries
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if ok {
				discarded[fmt.Sprintf("%x", sha256.Sum256(body))] = n
			}
			break
		}
	}
	close(stop)
	killerDone.Wait()
	d.kill()
	t.Logf("%d deliveries, %d discarded (frozen), %d SIGKILLs, %d attempts cut by a kill", deliveries, len(discarded), kills, failed)
	if kills < 5 {
		t.Fatalf("only %d kills: the test did not exercise crashes", kills)
	}

	f, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	db, err := statedb.Open(f.Server.DBPath(), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q, err := quarantine.New(db, quarantine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := q.List(quarantine.Filter{States: []quarantine.State{quarantine.Frozen}})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, e := range entries {
		msg, err := q.Message(e.ID) // verifies the stored bytes against e.Hash
		if err != nil {
			t.Fatalf("entry %s is damaged: %v", e.ID, err)
		}
		stored[fmt.Sprintf("%x", sha256.Sum256(mtatest.BodyOf(msg)))] = true
	}
	missing := 0
	for h, n := range discarded {
		if !stored[h] {
			missing++
			t.Errorf("delivery %d was discarded by the MTA but is not in the quarantine", n)
		}
	}
	t.Logf("%d frozen entries stored, all intact; %d discarded messages missing", len(entries), missing)
}
