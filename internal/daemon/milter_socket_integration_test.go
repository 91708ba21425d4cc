//go:build integration

package daemon

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/quarantine"
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
	sink := mtatest.StartSink(t)
	pf := mtatest.StartPostfix(t, mtatest.PostfixOptions{SinkAddr: sink.Addr(), MilterPrivate: "ratelimitd-milter"})
	sock := pf.PrivateSocket("ratelimitd-milter")
	td := startTestDaemon(t, testConfig(t, t.TempDir(), loopback(t), fmt.Sprintf(`socket_group = "postfix"

[milter]
listen = "unix:%s"

[[limit]]
name = "onefreeze"
key = ["sasl_username"]
limit = 1
period = "1h"
mode = "strict"
action = "freeze"
`, sock)))

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
	if fe := td.milterStatus(); fe.Listen != "unix:"+sock || !fe.LastConnect.IsZero() {
		t.Errorf("status before any mail does not say the milter was never reached: %s", fe)
	}

	for i := 1; i <= 2; i++ {
		if err := mtatest.Send(t, pf.Addr(), mtatest.Newsletter("milly", i)); err != nil {
			t.Fatalf("message %d: %v\nPostfix log:\n%s", i, err, pf.Log())
		}
	}
	sink.WaitCount(t, 1, 30*time.Second)
	if es := td.listed(""); len(es) != 1 || es[0].State != quarantine.Frozen || es[0].Subject != "newsletter part 02" {
		t.Fatalf("quarantine list after two messages:\n%s", entriesText(es))
	}
	if strings.Contains(pf.Log(), "Permission denied") {
		t.Errorf("Postfix could not reach the milter:\n%s", pf.Log())
	}
	if fe := td.milterStatus(); fe.LastConnect.IsZero() || fe.Connections == 0 {
		t.Errorf("status does not show Postfix's milter connection: %s", fe)
	}
}

// milterStatus is the milter's front-end line of the daemon's status.
func (td *testDaemon) milterStatus() admin.FrontEndStatus {
	td.t.Helper()
	for _, fe := range td.adminStatus().FrontEnds {
		if fe.FrontEnd == "milter" {
			return fe
		}
	}
	td.t.Fatal("status names no milter front end")
	return admin.FrontEndStatus{}
}
