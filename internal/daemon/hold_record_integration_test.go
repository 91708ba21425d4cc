//go:build integration

package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestIntegrationHoldNeverUntracked: with the state directory's file
// system full (a 1 MiB tmpfs; the test needs root), a hold the quarantine
// cannot record is answered 450 4.7.1, never HOLD: a real Postfix ends
// with no message in its hold queue that the quarantine has no entry for.
func TestIntegrationHoldNeverUntracked(t *testing.T) {
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	mtatest.MountTmpfs(t, stateDir)
	cfgPath, pf, sink := postfixOneHold(t, dir, "")
	td := startTestDaemon(t, cfgPath)
	if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", 1)); err != nil {
		t.Fatal(err)
	}
	sink.WaitCount(t, 1, 30*time.Second)

	mtatest.FillFileSystem(t, stateDir)
	deferred, accepted := 0, 0
	for i := 2; deferred < 3 && i < 600; i++ {
		err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("alice", i))
		switch {
		case err == nil:
			accepted++
		case strings.Contains(err.Error(), "450") && strings.Contains(err.Error(), "cannot be held"):
			deferred++
		default:
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if deferred == 0 {
		t.Fatalf("%d messages held with the disk full, none deferred", accepted)
	}
	if !strings.Contains(td.logs.String(), "deferring it instead of holding it") {
		t.Errorf("the deferral is not logged:\n%s", td.logs.String())
	}
	_, held := pf.WaitQueue(t, 30*time.Second, func(all, held []string) bool { return len(held) == accepted })
	es := td.listed("")
	n := 0
	for _, e := range es {
		if e.State == quarantine.Held {
			n++
		}
	}
	if n != len(held) || len(held) != accepted {
		t.Fatalf("%d messages in Postfix's hold queue, %d accepted, %d held entries:\n%s", len(held), accepted, n, entriesText(es))
	}
	t.Logf("disk full: %d holds recorded, then %d deferred", accepted, deferred)
}

// postfixOneHold starts an SMTP sink and a private Postfix whose policy
// service is a daemon to be configured (in dir) with extra, Postfix's
// hold commands and mtatest.OneHoldLimit; it returns the configuration's
// path.
func postfixOneHold(t *testing.T, dir, extra string) (string, *mtatest.Postfix, *mtatest.Sink) {
	addr := loopback(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), PolicyService: "inet:" + addr})
	return testConfig(t, dir, addr, extra+"\n[quarantine]\n"+pf.HoldCommands()+mtatest.OneHoldLimit), pf, sink
}
