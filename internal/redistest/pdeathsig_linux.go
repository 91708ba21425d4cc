package redistest

import "syscall"

// procAttr puts a server in its own process group and has the kernel kill
// it if the test binary dies (killed by a timeout or a signal), so no
// server outlives its test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
