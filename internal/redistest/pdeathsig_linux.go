package redistest

import "syscall"

// procAttr puts a server in its own process group, killed with the test
// binary.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
