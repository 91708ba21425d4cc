//go:build linux

package mtatest

import (
	"sync"
	"syscall"
	"time"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER from <linux/prctl.h>

var subreaperOnce sync.Once

// becomeSubreaper makes this process the reaper of orphaned descendants
// (PR_SET_CHILD_SUBREAPER); idempotent.
func becomeSubreaper() {
	subreaperOnce.Do(func() {
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	})
}

// sysProcAttr starts the master with a parent-death signal.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}

// reapGroup reaps process group pgid (its orphans are our children), and
// SIGKILLs it if it is not gone after grace; it reports whether the group
// was gone 2 s after that.
func reapGroup(pgid int, grace time.Duration) bool {
	gone := func() bool {
		for {
			if pid, err := syscall.Wait4(-pgid, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
		// A zombie counts: it is the child of a live member, or ours and
		// reaped at the next poll.
		return syscall.Kill(-pgid, 0) == syscall.ESRCH
	}
	if poll(grace, gone) {
		return true
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return poll(2*time.Second, gone)
}
