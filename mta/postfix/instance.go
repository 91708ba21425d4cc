package postfix

import (
	"strconv"

	"github.com/ratelimitd/ratelimitd/policy"
)

// messageTracker gives requests without an instance attribute (Postfix
// always sends one) one per mail transaction on a connection: a new one
// when the state goes back, after END-OF-MESSAGE, or when the sender
// changes. One-request connections (Exim) must send their own.
type messageTracker struct {
	conn   uint64
	seq    int
	rank   int
	sender string
	buf    []byte
}

// stateRank orders the states of a mail transaction; 0 for the others.
func stateRank(s string) int {
	switch s {
	case policy.StateMail:
		return 1
	case policy.StateRcpt:
		return 2
	case policy.StateData:
		return 3
	case policy.StateEndOfMessage:
		return 4
	}
	return 0
}

// fill sets req.Instance when it is empty.
func (t *messageTracker) fill(req *policy.Request) {
	r := stateRank(req.ProtocolState)
	if req.Instance != "" || r == 0 {
		return
	}
	if t.seq == 0 || r < t.rank || (r == t.rank && r != 2) || t.rank == 4 || req.Sender != t.sender {
		t.seq++
		t.sender = req.Sender
	}
	t.rank = r
	t.buf = append(t.buf[:0], "ratelimitd-conn-"...)
	t.buf = strconv.AppendUint(t.buf, t.conn, 10)
	t.buf = append(t.buf, '.')
	t.buf = strconv.AppendInt(t.buf, int64(t.seq), 10)
	req.Instance = string(t.buf)
}
