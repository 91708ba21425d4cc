package policy

import (
	"fmt"
	"slices"
	"sync/atomic"
)

// stateNames are the states stageCounts counts, in session order.
var stateNames = [...]string{StateConnect, StateEHLO, StateHELO, StateMail, StateRcpt, StateData,
	StateEndOfMessage, StateVrfy, StateEtrn}

// stateIndex is s's index in stateNames, or -1.
func stateIndex(s string) int { return slices.Index(stateNames[:], s) }

// stageCounts counts requests per front end and protocol state, so the
// daemon learns where the MTA asks.
type stageCounts struct {
	n [2][len(stateNames)]atomic.Uint64
}

func (s *stageCounts) add(front int, state string) {
	if i := stateIndex(state); i >= 0 {
		s.n[front][i].Add(1)
	}
}

func (s *stageCounts) get(front int, state string) uint64 {
	if i := stateIndex(state); i >= 0 {
		return s.n[front][i].Load()
	}
	return 0
}

// messageRequests returns front's requests about mail transactions.
func (s *stageCounts) messageRequests(front int) uint64 {
	c := &s.n[front]
	return c[3].Load() + c[4].Load() + c[5].Load() + c[6].Load() // MAIL, RCPT, DATA, END-OF-MESSAGE
}

// joinWarmUp is how many message requests a front end sends before its
// messages stop waiting for a front end that has not asked yet.
const joinWarmUp = 4096

// joinable reports whether front's new message may join the other's view.
func (s *stageCounts) joinable(front int) bool {
	return s.messageRequests(1-front) > 0 || s.messageRequests(front) < joinWarmUp
}

// StageCount is one front end's requests at one state since start.
type StageCount struct {
	// Via is the front end, ViaPolicy or ViaMilter.
	Via      string `json:"via"`
	State    string `json:"state"`
	Requests uint64 `json:"requests"`
}

// Stages returns the states each front end asked at, with counts.
func (e *Engine) Stages() []StageCount {
	var out []StageCount
	for f, via := range []string{ViaPolicy, ViaMilter} {
		for i, st := range stateNames {
			if n := e.seen.n[f][i].Load(); n > 0 {
				out = append(out, StageCount{Via: via, State: st, Requests: n})
			}
		}
	}
	return out
}

// MessagesOpen returns the number of messages asked about, admitted so
// far and not yet at END-OF-MESSAGE (nor forgotten by the bounded table).
func (e *Engine) MessagesOpen() int {
	n := 0
	for i := range e.msgs.shards {
		n += int(e.msgs.shards[i].nOpen.Load())
	}
	return n
}

// Footprint estimates the message table's memory, in bytes.
func (e *Engine) Footprint() int64 {
	var n int64
	for i := range e.msgs.shards {
		sh := &e.msgs.shards[i]
		sh.mu.Lock()
		n += int64(sh.inUse+len(sh.free)) * entryBytes
		sh.mu.Unlock()
	}
	return n
}

// Advice returns plain-word warnings about limits that cannot count as
// configured, from the configuration and the stages seen, each naming the
// Postfix or Exim line to add; empty when every limit counts.
func (e *Engine) Advice() []string {
	c := e.cfg.Load()
	var out []string
	policyMsgs, milterMsgs := e.seen.messageRequests(0), e.seen.messageRequests(1)
	policySize := e.seen.get(0, StateData) + e.seen.get(0, StateEndOfMessage)
	for i := range c.limits {
		l := &c.limits[i]
		if l.per == perByte && policyMsgs > 0 && policySize == 0 && milterMsgs == 0 {
			out = append(out, fmt.Sprintf("limit %s counts bytes, but the MTA asks only before the message data, "+
				"where the size is the SIZE= a client may declare at MAIL FROM (often none): add "+
				"\"smtpd_end_of_data_restrictions = check_policy_service ...\" to Postfix's main.cf "+
				"(Exim: \"acl_smtp_data\" calling acl_ratelimitd_data), or use the milter", l.name))
		}
		if l.action == Freeze && len(l.via) == 0 && policyMsgs > 0 && milterMsgs > 0 {
			out = append(out, fmt.Sprintf("limit %s freezes, and the MTA asks through both policy delegation and the milter: "+
				"each message is charged once, by whichever asks first (policy delegation, which can only hold); "+
				"add via = [\"milter\"] to the limit so the milter freezes", l.name))
		}
		if l.per == perConn && policyMsgs > 0 && e.seen.get(0, StateConnect) == 0 && (len(l.via) == 0 || l.via[0] == ViaPolicy) {
			out = append(out, fmt.Sprintf("limit %s counts connections, but the MTA does not ask at CONNECT: it counts "+
				"messages instead; add \"smtpd_client_restrictions = check_policy_service ...\" to Postfix's main.cf", l.name))
		}
	}
	return out
}

// ConfigAdvice returns the warnings about c alone (config check, start).
func ConfigAdvice(c Config) []string {
	var out []string
	form := c.keyForm(func(string, string, ...any) {})
	for _, l := range c.Limits {
		out = append(out, foldedOverrides(l, form)...)
		switch l.Per {
		case "byte":
			out = append(out, fmt.Sprintf("limit %s counts bytes: it needs the message size, known at END-OF-MESSAGE "+
				"(Postfix: \"smtpd_end_of_data_restrictions = check_policy_service ...\"; Exim: acl_ratelimitd_data; or "+
				"the milter); asked only at RCPT it counts the SIZE= declared at MAIL FROM", l.Name))
		case "addr":
			out = append(out, fmt.Sprintf("limit %s counts unique recipients: it needs the MTA to ask at RCPT "+
				"(Postfix: smtpd_recipient_restrictions; Exim: the RCPT ACL); asked only at DATA or END-OF-MESSAGE, "+
				"a message with several recipients is charged recipient_count, every recipient as new", l.Name))
		case "conn":
			out = append(out, fmt.Sprintf("limit %s counts connections: it needs the MTA to ask at CONNECT "+
				"(Postfix: \"smtpd_client_restrictions = check_policy_service ...\"); otherwise each message counts as one", l.Name))
		}
	}
	return out
}
