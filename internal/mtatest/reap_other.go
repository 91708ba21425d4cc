//go:build !linux

package mtatest

import (
	"syscall"
	"time"
)

// Elsewhere than Linux the daemons exit on their own after SIGTERM.

func becomeSubreaper() {}

func sysProcAttr() *syscall.SysProcAttr { return nil }

func reapGroup(pgid int, grace time.Duration) bool { return true }
