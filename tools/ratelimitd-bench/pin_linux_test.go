package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cpusOf returns the CPUs thread (or process) tid may run on.
func cpusOf(t *testing.T, tid int) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(tid, &set); err != nil {
		t.Fatalf("sched_getaffinity(%d): %v", tid, err)
	}
	var cpus []int
	for cpu := range maxCPU {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	return cpus
}

// threadsOf returns the thread ids of process pid.
func threadsOf(t *testing.T, pid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// --pin: a server started with the servers' CPUs runs on them only, this
// program's threads keep the CPUs they had, and pinProcess moves every
// thread of a running process. On a machine with one CPU, --pin is
// refused.
func TestPin(t *testing.T) {
	all := cpusOf(t, 0)
	gen, servers, err := pinPlan()
	if len(all) < 2 {
		if err == nil {
			t.Fatalf("pinPlan accepted %d CPU(s): generator %v, servers %v", len(all), gen, servers)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gen, all[:1]) || !slices.Equal(servers, all[1:]) {
		t.Fatalf("pinPlan over %v: generator %v, servers %v", all, gen, servers)
	}
	mine := make(map[int][]int)
	for _, tid := range threadsOf(t, os.Getpid()) {
		mine[tid] = cpusOf(t, tid)
	}

	c, err := startChild("sleep", exec.Command("sleep", "30"), "", servers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.stop(5 * time.Second) })
	if got := cpusOf(t, c.pid()); !slices.Equal(got, servers) {
		t.Errorf("child runs on CPUs %v, want %v", got, servers)
	}
	for _, tid := range threadsOf(t, os.Getpid()) {
		if was, ok := mine[tid]; ok && !slices.Equal(cpusOf(t, tid), was) {
			t.Errorf("thread %d of this program runs on CPUs %v after starting the child, before %v", tid, cpusOf(t, tid), was)
		}
	}

	if err := pinProcess(c.pid(), gen); err != nil {
		t.Fatal(err)
	}
	for _, tid := range threadsOf(t, c.pid()) {
		if got := cpusOf(t, tid); !slices.Equal(got, gen) {
			t.Errorf("after pinProcess, child thread %d runs on CPUs %v, want %v", tid, got, gen)
		}
	}
}
