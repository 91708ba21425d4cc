//go:build !linux

package mtatest

import (
	"syscall"
	"time"
)

// Postfix runs on Linux in this project's tests; elsewhere the daemons are
// left to exit on their own after the master's SIGTERM.

func becomeSubreaper() {}

func sysProcAttr() *syscall.SysProcAttr { return nil }

func reapGroup(pgid int, grace time.Duration) []int { return nil }
