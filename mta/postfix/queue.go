package postfix

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// CommandTimeout bounds each queue command.
const CommandTimeout = 30 * time.Second

// Queue runs the MTA's queue commands on held mail for lifecycle, without
// a shell, "{queue_id}" replaced by an ID quarantine.ValidQueueID accepts:
// postsuper, postqueue and postcat, or exim -Mt, -Mrm, -Mvc and -bp (Exim
// specification, "The Exim command line"). Fields must not change once in
// use; methods are safe for concurrent use.
type Queue struct {
	// ReleaseCommands release a held message: the first decides success
	// (postsuper -H), later ones' failures are warnings (postqueue -i).
	ReleaseCommands [][]string
	ExpireCommands  [][]string // bounce it (postsuper -f, postqueue -i), like Release
	DeleteCommand   []string   // postsuper -d
	ShowCommand     []string   // postcat -q
	ListCommand     []string   // postqueue -j or exim -bp; empty: quarantine.ErrNoQueueList
}

// Release runs ReleaseCommands for queueID: the first command's failure is
// err, the later ones' failures are the warnings.
func (q *Queue) Release(ctx context.Context, queueID string) (warnings []error, err error) {
	return q.sequence(ctx, "release", q.ReleaseCommands, queueID)
}

// Expire runs ExpireCommands for queueID, like Release.
func (q *Queue) Expire(ctx context.Context, queueID string) (warnings []error, err error) {
	return q.sequence(ctx, "expire", q.ExpireCommands, queueID)
}

// Delete runs DeleteCommand for queueID.
func (q *Queue) Delete(ctx context.Context, queueID string) error {
	_, err := q.run(ctx, q.DeleteCommand, queueID)
	return err
}

// Show runs ShowCommand for queueID and returns its combined output.
func (q *Queue) Show(ctx context.Context, queueID string) ([]byte, error) {
	return q.run(ctx, q.ShowCommand, queueID)
}

// queuedMessage is the part of a postqueue -j object the life cycle uses.
type queuedMessage struct {
	QueueName   string `json:"queue_name"`
	QueueID     string `json:"queue_id"`
	ArrivalTime int64  `json:"arrival_time"`
	MessageSize int64  `json:"message_size"`
	Sender      string `json:"sender"`
	Recipients  []struct {
		Address string `json:"address"`
	} `json:"recipients"`
}

// List runs ListCommand and parses postqueue -j JSON lines (bad ones
// skipped) or exim -bp (ParseEximQueue).
func (q *Queue) List(ctx context.Context) ([]quarantine.QueuedMessage, error) {
	args := q.ListCommand
	if len(args) == 0 {
		return nil, quarantine.ErrNoQueueList
	}
	ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	if t := bytes.TrimSpace(out); len(t) > 0 && t[0] != '{' {
		return ParseEximQueue(out), nil
	}
	var msgs []quarantine.QueuedMessage
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var m queuedMessage
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			continue
		}
		qm := quarantine.QueuedMessage{Queue: m.QueueName, QueueID: m.QueueID,
			Arrival: time.Unix(m.ArrivalTime, 0), Sender: m.Sender, Size: m.MessageSize}
		for _, r := range m.Recipients {
			qm.Recipients = append(qm.Recipients, r.Address)
		}
		msgs = append(msgs, qm)
	}
	return msgs, sc.Err()
}

// sequence runs cmds in order for queueID: the first decides success (its
// error is returned as err), the failures of later ones are the warnings.
func (q *Queue) sequence(ctx context.Context, op string, cmds [][]string, queueID string) (warnings []error, err error) {
	if len(cmds) == 0 {
		return nil, fmt.Errorf("postfix: no %s command configured", op)
	}
	if _, err := q.run(ctx, cmds[0], queueID); err != nil {
		return nil, err
	}
	for _, c := range cmds[1:] {
		if _, err := q.run(ctx, c, queueID); err != nil {
			warnings = append(warnings, err)
		}
	}
	return warnings, nil
}

// run runs tmpl with {queue_id} replaced and returns its combined output.
func (q *Queue) run(ctx context.Context, tmpl []string, queueID string) ([]byte, error) {
	if !quarantine.ValidQueueID(queueID) {
		return nil, fmt.Errorf("postfix: refusing to run a command with %q: not a Postfix or Exim queue ID",
			termsafe.Line(queueID[:min(len(queueID), 64)]))
	}
	if len(tmpl) == 0 {
		return nil, errors.New("postfix: empty command")
	}
	args := make([]string, len(tmpl))
	for i, a := range tmpl {
		args[i] = strings.ReplaceAll(a, "{queue_id}", queueID)
	}
	ctx, cancel := context.WithTimeout(ctx, CommandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}
