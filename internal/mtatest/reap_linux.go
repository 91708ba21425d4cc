//go:build linux

package mtatest

import (
	"os"
	"strconv"
	"strings"
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

// reapGroup reaps process group pgid, SIGKILLing it after grace; it returns
// the PIDs that survived.
func reapGroup(pgid int, grace time.Duration) []int {
	deadline := time.Now().Add(grace)
	killed := false
	reap := func() {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-pgid, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				return
			}
		}
	}
	for {
		reap()
		alive := groupMembers(pgid)
		if len(alive) == 0 {
			reap()
			return nil
		}
		if time.Now().After(deadline) {
			if killed {
				return alive
			}
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			killed = true
			deadline = time.Now().Add(2 * time.Second)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// groupMembers lists the processes in group pgid that are not zombies.
func groupMembers(pgid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may contain spaces.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, err := strconv.Atoi(f[2]); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	return pids
}
