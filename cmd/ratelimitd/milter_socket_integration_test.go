//go:build integration

package main

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
)

// TestIntegrationMilterSocketInPostfixPrivate: the milter listens on a
// unix socket in a real Postfix's private/ directory with socket_group =
// "postfix", as docs/postfix.md recommends. smtpd runs as the postfix user,
// so the socket must belong to that group: then Postfix reaches the milter,
// the second message of a 1/hour freeze limit is frozen, and status shows
// when Postfix last connected to the milter. A socket left root:root makes
// Postfix log "Permission denied" and apply milter_default_action
// (tempfail here) to every message.
func TestIntegrationMilterSocketInPostfixPrivate(t *testing.T) {
	dir := t.TempDir()
	port := freePort(t)
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), MilterPrivate: "ratelimitd-milter"})
	sock := pf.PrivateSocket("ratelimitd-milter")
	cfgPath := writeConfig(t, dir, fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf(`socket_group = "postfix"

[milter]
listen = "unix:%s"

[[limit]]
name = "onefreeze"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "freeze"
`, sock))
	startTestDaemon(t, cfgPath)

	grp, err := user.LookupGroup("postfix")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if gid := strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Gid)); gid != grp.Gid {
		t.Errorf("milter socket %s has group %s, want postfix (%s), mode %v", sock, gid, grp.Gid, fi.Mode())
	}
	out, _ := cli(t, "--config", cfgPath, "status")
	if !strings.Contains(out, "front end milter unix:"+sock+": no MTA has connected since start") {
		t.Errorf("status before any mail does not say the milter was never reached:\n%s", out)
	}

	for i := 1; i <= 2; i++ {
		if err := sendNumbered(t, pf.Addr(), "milly", i); err != nil {
			t.Fatalf("message %d: %v\nPostfix log:\n%s", i, err, pf.Log())
		}
	}
	sink.WaitCount(t, 1, 30*time.Second)
	out, err = cli(t, "--config", cfgPath, "quarantine", "list", "--json")
	if err != nil || strings.Count(out, `"state": "frozen"`) != 1 || !strings.Contains(out, "newsletter part 02") {
		t.Fatalf("quarantine list after two messages: %v\n%s", err, out)
	}
	if strings.Contains(pf.Log(), "Permission denied") {
		t.Errorf("Postfix could not reach the milter:\n%s", pf.Log())
	}
	out, _ = cli(t, "--config", cfgPath, "status")
	if !strings.Contains(out, "front end milter unix:"+sock+": MTA last connected") {
		t.Errorf("status does not show Postfix's milter connection:\n%s", out)
	}
}
