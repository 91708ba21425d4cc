//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

// pinPlan fails outside Linux: --pin uses Linux CPU affinity.
func pinPlan() (gen, servers []int, err error) {
	return nil, nil, errors.New("--pin is supported on Linux only")
}

// pinProcess is never called outside Linux (pinPlan fails first).
func pinProcess(int, []int) error { return errors.New("--pin is supported on Linux only") }

// startOn starts cmd; cpus is always nil outside Linux.
func startOn(cmd *exec.Cmd, _ []int) error { return cmd.Start() }
