//go:build !linux

package main

import "os/exec"

// setParentDeathSignal does nothing outside Linux: a server started by
// this program is stopped by it, but survives it if it is killed.
func setParentDeathSignal(*exec.Cmd) {}
