package postfix

import (
	"bufio"
	"bytes"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/quarantine"
)

// eximBase62 is the alphabet of Exim message IDs, whose first six
// characters are the arrival time (Exim specification, "How Exim receives
// and delivers mail").
const eximBase62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// ParseEximQueue parses exim -bp (Exim specification, "The Exim command
// line"): age, size, ID, <sender>, "*** frozen ***" (Queue "hold", else
// "queued"), then indented recipients ("D " delivered). Arrival comes from
// the ID; other lines are skipped.
func ParseEximQueue(out []byte) []quarantine.QueuedMessage {
	var msgs []quarantine.QueuedMessage
	var cur *quarantine.QueuedMessage
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			cur = nil
			continue
		}
		f := strings.Fields(line)
		// The age is right-aligned, so a message's first line may be
		// indented too; recipient lines have one or two fields.
		if m, ok := eximHeadLine(f); ok {
			msgs = append(msgs, m)
			cur = &msgs[len(msgs)-1]
			continue
		}
		if cur == nil || len(f) > 2 || line[0] != ' ' && line[0] != '\t' {
			cur = nil
			continue
		}
		if len(f) == 2 && f[0] == "D" {
			continue // delivered
		}
		cur.Recipients = append(cur.Recipients, strings.Trim(f[0], "<>"))
	}
	return msgs
}

// eximHeadLine parses the first line of a message in exim -bp:
// "AGE SIZE ID <SENDER> [*** frozen ***]".
func eximHeadLine(f []string) (quarantine.QueuedMessage, bool) {
	if len(f) < 4 || !quarantine.ValidQueueID(f[2]) || !strings.HasPrefix(f[3], "<") || !strings.HasSuffix(f[3], ">") {
		return quarantine.QueuedMessage{}, false
	}
	m := quarantine.QueuedMessage{Queue: "queued", QueueID: f[2], Sender: f[3][1 : len(f[3])-1]}
	if strings.Contains(strings.Join(f[4:], " "), "*** frozen ***") {
		m.Queue = "hold"
	}
	if t, ok := eximArrival(m.QueueID); ok {
		m.Arrival = t
	}
	return m, true
}

// eximArrival decodes the arrival time from the first six base-62 digits
// of an Exim message ID.
func eximArrival(id string) (time.Time, bool) {
	if len(id) < 7 || id[6] != '-' {
		return time.Time{}, false
	}
	var sec int64
	for i := range 6 {
		d := strings.IndexByte(eximBase62, id[i])
		if d < 0 {
			return time.Time{}, false
		}
		sec = sec*62 + int64(d)
	}
	return time.Unix(sec, 0), true
}
