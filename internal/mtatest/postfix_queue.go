package mtatest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Command returns the Postfix command name (postfix, postqueue, ...)
// against this instance: "-c DIR" before args.
func (p *Postfix) Command(name string, args ...string) *exec.Cmd {
	path := cmp.Or(lookCommand(name, p.cmdDir), filepath.Join(p.cmdDir, name))
	return exec.Command(path, append([]string{"-c", p.confDir}, args...)...)
}

// run runs a Postfix command and fails the test if it fails.
func (p *Postfix) run(t testing.TB, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := p.Command(name, args...)
	var o, e bytes.Buffer
	cmd.Stdout = &o
	cmd.Stderr = &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("mtatest: %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(cmd.Args, " "), err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// QueueEntry is one message in the queue, as "postqueue -j" prints it.
type QueueEntry struct {
	QueueName   string      `json:"queue_name"` // incoming, active, deferred, hold, maildrop
	QueueID     string      `json:"queue_id"`
	ArrivalTime int64       `json:"arrival_time"` // Unix seconds
	MessageSize int64       `json:"message_size"`
	Sender      string      `json:"sender"`
	Recipients  []queueRcpt `json:"recipients"`
}

type queueRcpt struct {
	Address string `json:"address"`
}

// Queue lists the queue ("postqueue -j").
func (p *Postfix) Queue(t testing.TB) []QueueEntry {
	t.Helper()
	out, _ := p.run(t, "postqueue", "-j")
	var entries []QueueEntry
	for dec := json.NewDecoder(strings.NewReader(out)); dec.More(); {
		var e QueueEntry
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("mtatest: postqueue -j: %v\n%s", err, out)
		}
		entries = append(entries, e)
	}
	return entries
}

// QueueIDs returns the IDs of all queued messages and of the held ones.
func (p *Postfix) QueueIDs(t testing.TB) (all, held []string) {
	t.Helper()
	for _, e := range p.Queue(t) {
		all = append(all, e.QueueID)
		if e.QueueName == "hold" {
			held = append(held, e.QueueID)
		}
	}
	return all, held
}

// WaitQueue waits until done holds for QueueIDs; see WaitFor.
func (p *Postfix) WaitQueue(t testing.TB, timeout time.Duration, done func(all, held []string) bool) (all, held []string) {
	t.Helper()
	WaitFor(t, timeout, func() error {
		if all, held = p.QueueIDs(t); !done(all, held) {
			return fmt.Errorf("Postfix queue not as wanted: all %v, held %v", all, held)
		}
		return nil
	})
	return all, held
}

// WaitQueueEmpty waits until the queue is empty; see WaitQueue.
func (p *Postfix) WaitQueueEmpty(t testing.TB, timeout time.Duration) {
	t.Helper()
	p.WaitQueue(t, timeout, func(all, _ []string) bool { return len(all) == 0 })
}

// Cat returns "postcat -q ID": the queue file's envelope, header and body.
func (p *Postfix) Cat(t testing.TB, id string) string {
	t.Helper()
	out, _ := p.run(t, "postcat", "-q", id)
	return out
}
