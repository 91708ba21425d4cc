package daemontest

import "syscall"

// procAttr has the kernel kill a daemon if the test binary dies (killed
// by a timeout or a signal), so no daemon outlives its test.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
