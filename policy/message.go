package policy

import (
	"strings"
	"sync"
	"sync/atomic"
)

// Per-message bookkeeping.
//
// An MTA may ask about one message several times: Postfix once per RCPT
// (check_policy_service in smtpd_recipient_restrictions), again at DATA
// and END-OF-MESSAGE (smtpd_data_restrictions,
// smtpd_end_of_data_restrictions), and its milters once more per RCPT and at
// end of message. Exim asks from its RCPT ACL and its DATA ACL. Whatever the
// layout, each message is charged once per limit: per_mail and per_conn at
// the first request of the message that a limit sees, per_rcpt once per
// recipient (at RCPT, or from recipient_count at DATA/END-OF-MESSAGE for
// recipients not seen at RCPT), per_byte with the size known at the first
// request and topped up by the difference when a later request knows a
// larger size (the real size at END-OF-MESSAGE after the SIZE= declared at
// MAIL FROM). The verdict of the per_mail, per_byte and per_conn limits is
// the message's: every later request of the message gets it again without
// being counted again (Exim's specification, chapter "Rate limiting", gives
// every RCPT of a message the message's answer in the same way).
//
// A message is identified by its front end, client address and the MTA's
// instance value (Postfix's policy-delegation "instance" attribute; the
// milter front end makes one per transaction; Exim's ACLs in configs/ send
// an acl_m variable). When one Postfix asks through both front ends, the
// milter's view of a message is joined to the policy service's view of the
// same message by its client address, SASL user and sender, first come
// first joined, so the message is charged once.
//
// Memory is bounded: messages live in two generations of at most
// msgGenSize entries each; a message is forgotten at END-OF-MESSAGE or when
// its generation is dropped. A forgotten message that is asked about again
// is charged again, as a new message: over-counting, never under-counting.

// msgGenSize bounds one generation of the message table.
const msgGenSize = 1 << 15

// pendMax bounds the messages of one (client, user, sender) waiting to be
// joined by the other front end.
const pendMax = 16

// frontIndex maps Request.Stage to 0 (policy delegation, the default) or 1
// (milter).
func frontIndex(stage string) int {
	if stage == ViaMilter {
		return 1
	}
	return 0
}

// charge is what one message has been charged under one limit.
type charge struct {
	limit     string
	mail      bool    // per_mail or per_conn charged
	byteSeen  bool    // a size has been measured
	bytes     float64 // bytes charged (per_byte)
	rcpts     int     // RCPTs charged (per_rcpt)
	rcptsOK   int     // recipients charged and admitted (compared with recipient_count)
	rcptsSeen [2]int  // RCPT requests seen per front end under this limit
}

// msgEntry is one message in flight.
type msgEntry struct {
	mu sync.Mutex
	// verdict is the message's verdict (per_mail, per_byte, per_conn),
	// without Measures, per front end (a joined message is judged by each
	// front end's own limits: the milter's freeze is not the policy
	// service's); zero while admitted with no warning.
	verdict [2]Decision
	charges []charge
	// pendFP is the join fingerprint while the message waits for the
	// other front end; pendFront the front end that registered it.
	pendFP    string
	pendFront int
	joined    bool
}

// chargeOf returns the charge record of limit name, adding one if needed.
func (m *msgEntry) chargeOf(name string) *charge {
	for i := range m.charges {
		if m.charges[i].limit == name {
			return &m.charges[i]
		}
	}
	m.charges = append(m.charges, charge{limit: name})
	return &m.charges[len(m.charges)-1]
}

type msgGen struct {
	msgs map[string]*msgEntry
	pend map[string][]*msgEntry
}

func newMsgGen() msgGen {
	return msgGen{msgs: make(map[string]*msgEntry), pend: make(map[string][]*msgEntry)}
}

// msgTable holds the messages in flight. Safe for concurrent use.
type msgTable struct {
	mu       sync.Mutex
	cur, old msgGen
	live     atomic.Int64 // entries in cur + old, for status
}

func msgKey(req *Request) string {
	return req.Stage + "\x00" + req.ClientAddress + "\x00" + req.Instance
}

func joinFingerprint(req *Request) string {
	return req.ClientAddress + "\x00" + strings.ToLower(req.SASLUsername) + "\x00" + strings.ToLower(req.Sender)
}

// get returns the entry of req's message, creating it (and joining it to
// the other front end's view of the same message, if one waits) when it is
// new. It returns nil for a request without an instance: such a request is
// a message of its own.
func (t *msgTable) get(req *Request) *msgEntry {
	if req.Instance == "" {
		return nil
	}
	k := msgKey(req)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cur.msgs == nil {
		t.cur, t.old = newMsgGen(), newMsgGen()
	}
	if m, ok := t.cur.msgs[k]; ok {
		return m
	}
	if m, ok := t.old.msgs[k]; ok {
		delete(t.old.msgs, k)
		t.put(k, m)
		return m
	}
	front := frontIndex(req.Stage)
	fp := joinFingerprint(req)
	if m := t.takePending(fp, 1-front); m != nil {
		m.joined = true
		t.put(k, m)
		return m
	}
	m := &msgEntry{pendFP: fp, pendFront: front}
	t.put(k, m)
	t.cur.pend[fp] = append(t.cur.pend[fp], m)
	if p := t.cur.pend[fp]; len(p) > pendMax {
		p[0].pendFP = ""
		t.cur.pend[fp] = p[1:]
	}
	return m
}

// put stores m under k in the current generation, rotating when it is full.
func (t *msgTable) put(k string, m *msgEntry) {
	if len(t.cur.msgs)+len(t.cur.pend) >= msgGenSize {
		for _, p := range t.old.pend {
			for _, e := range p {
				e.pendFP = ""
			}
		}
		t.old, t.cur = t.cur, newMsgGen()
	}
	t.cur.msgs[k] = m
	t.live.Store(int64(len(t.cur.msgs) + len(t.old.msgs)))
}

// takePending removes and returns the oldest message of fingerprint fp
// registered by front end front, or nil.
func (t *msgTable) takePending(fp string, front int) *msgEntry {
	for _, g := range []*msgGen{&t.old, &t.cur} {
		p := g.pend[fp]
		for i, m := range p {
			if m.pendFront != front || m.pendFP == "" {
				continue
			}
			g.pend[fp] = append(p[:i:i], p[i+1:]...)
			if len(g.pend[fp]) == 0 {
				delete(g.pend, fp)
			}
			m.pendFP = ""
			return m
		}
	}
	return nil
}

// unpend withdraws m from joining (it was refused: the other front end
// never sees a refused message).
func (t *msgTable) unpend(m *msgEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if m.pendFP == "" {
		return
	}
	for _, g := range []*msgGen{&t.cur, &t.old} {
		p := g.pend[m.pendFP]
		for i, e := range p {
			if e == m {
				g.pend[m.pendFP] = append(p[:i:i], p[i+1:]...)
				if len(g.pend[m.pendFP]) == 0 {
					delete(g.pend, m.pendFP)
				}
			}
		}
	}
	m.pendFP = ""
}

// done forgets req's view of its message (END-OF-MESSAGE). A message still
// waiting for the other front end stays joinable until its generation goes.
func (t *msgTable) done(req *Request) {
	if req.Instance == "" {
		return
	}
	k := msgKey(req)
	t.mu.Lock()
	delete(t.cur.msgs, k)
	delete(t.old.msgs, k)
	t.live.Store(int64(len(t.cur.msgs) + len(t.old.msgs)))
	t.mu.Unlock()
}

// len returns the number of messages remembered.
func (t *msgTable) len() int { return int(t.live.Load()) }
