package postfix

import (
	"strconv"

	"github.com/ratelimitd/ratelimitd/policy"
)

// messageTracker gives requests that carry no instance attribute one of
// their own, the same for every request of one mail transaction on one
// connection, so the engine counts such a message once and answers its
// RCPTs consistently. Postfix always sends instance (SMTPD_POLICY_README,
// "Policy protocol description"); other clients of the protocol may not.
//
// A new transaction starts when the protocol state goes back (a RCPT after
// DATA or END-OF-MESSAGE, a MAIL after RCPT), after END-OF-MESSAGE, or
// when the sender changes. A client that opens one connection per request
// (Exim's ${readsocket}) gets one message per request: it must send an
// instance of its own (configs/exim-acl.conf does).
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
