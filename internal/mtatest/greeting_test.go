package mtatest

import (
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestWaitGreetingOwnInstance checks that waitGreeting does not take
// another server's greeting for its Postfix's: when a port picked free is
// taken by a Postfix of a test running in parallel before this master binds
// it, this master exits and the other answers on the port. Before the
// greeting named the instance, waitGreeting returned at that answer and the
// test talked to the other Postfix (TestPolicyDeferAndHold got the other
// instance's re-injection service: "554 5.7.1 ... Access denied").
func TestWaitGreetingOwnInstance(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("220 mtatest.localdomain ESMTP Postfix mtatest-other\r\n"))
			c.Close()
		}
	}()
	exited := make(chan struct{})
	p := &Postfix{root: "/tmp/mtatest-mine", cmd: &exec.Cmd{}, exited: exited}
	time.AfterFunc(300*time.Millisecond, func() { close(exited) }) // this master gives up the port
	err = p.waitGreeting(ln.Addr().String(), 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "master exited") {
		t.Fatalf("waitGreeting with another instance on the port = %v, want the master's exit", err)
	}

	// Its own greeting is taken.
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	go func() {
		c, err := own.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("220 mtatest.localdomain ESMTP Postfix " + banner(p.root) + "\r\n"))
		c.Close()
	}()
	p.exited = make(chan struct{})
	if err := p.waitGreeting(own.Addr().String(), 10*time.Second); err != nil {
		t.Fatalf("waitGreeting with its own instance = %v", err)
	}
}
