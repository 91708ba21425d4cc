//go:build !linux

package daemontest

import "syscall"

// procAttr: no parent-death signal outside Linux; t.Cleanup ends the
// daemons.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
