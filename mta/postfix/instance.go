package postfix

import (
	"slices"
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

// transactionStates are the states of a mail transaction, in order: a
// state's rank is its index + 1, 0 for the others.
var transactionStates = []string{policy.StateMail, policy.StateRcpt, policy.StateData, policy.StateEndOfMessage}

// fill sets req.Instance when it is empty.
func (t *messageTracker) fill(req *policy.Request) {
	r := slices.Index(transactionStates, req.ProtocolState) + 1
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
