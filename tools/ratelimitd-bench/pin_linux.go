package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// maxCPU bounds the CPU numbers looked at (the size of a Linux CPU set).
const maxCPU = 1024

// pinPlan splits the CPUs this program may run on (its affinity mask):
// the first for the load generator, the others for the servers. It fails
// with fewer than two.
func pinPlan() (gen, servers []int, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, nil, fmt.Errorf("--pin: %w", err)
	}
	var cpus []int
	for cpu := range maxCPU {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		return nil, nil, fmt.Errorf("--pin needs at least 2 CPUs, this program may run on %d", len(cpus))
	}
	return cpus[:1], cpus[1:], nil
}

func cpuSetOf(cpus []int) unix.CPUSet {
	var set unix.CPUSet
	for _, cpu := range cpus {
		set.Set(cpu)
	}
	return set
}

// pinProcess restricts every thread of process pid to cpus. A thread
// started while the threads are walked inherits the mask of the thread
// that started it, which may not be restricted yet, so the walk is
// repeated until it finds no thread it has not restricted.
func pinProcess(pid int, cpus []int) error {
	set := cpuSetOf(cpus)
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	done := make(map[int]bool)
	for {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("--pin: %w", err)
		}
		n := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("--pin: thread %d: %w", tid, err)
			}
			done[tid] = true
			n++
		}
		if n == 0 {
			return nil
		}
	}
}

// startOn starts cmd restricted to cpus (nil: wherever this program may
// run): the calling thread's CPU mask is set to cpus while it starts the
// process, which inherits it, so that every thread of the new process is
// restricted from its start (a Go server then sizes GOMAXPROCS to them).
func startOn(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("--pin: %w", err)
	}
	set := cpuSetOf(cpus)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("--pin: %w", err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		// The process runs; the caller stops it and the program.
		err = fmt.Errorf("--pin: restoring this thread's CPUs: %w", rerr)
	}
	return err
}
