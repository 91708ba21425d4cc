package maillog

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/policy"
)

// Kind says what a log line tells about a message.
type Kind uint8

// The kinds of Record.
const (
	KindOther     Kind = iota // about a queued message, nothing a trace needs
	KindClient                // smtpd "client=name[addr], sasl_username=..."
	KindPickup                // pickup "uid=N from=<...>"
	KindMessageID             // cleanup "message-id=<...>"
	KindFrom                  // qmgr "from=<...>, size=N, nrcpt=N"
	KindTo                    // "to=<...>, orig_to=<...>"; Exim =>, ->, **, ==, *>
	KindRemoved               // qmgr "removed"
	KindReject                // reject:, discard:, milter-reject:, milter-discard: with a queue ID
	KindHold                  // hold:, milter-hold:
	KindNoQueue               // smtpd "NOQUEUE: reject: ..."
	KindArrival               // Exim "<="
	KindCompleted             // Exim "Completed"
)

// Record is what one log line says about one message. Recipient is
// orig_to= when logged, else to=; Recipients are Exim's "for a b c".
// Reject is the stage ("RCPT", "DATA") of a reject, NOQUEUE or hold line.
// DSN is a to= line's dsn= ("5.1.1") or a reject's enhanced code, Status
// the first word of status= ("sent", "deferred", "bounced"). Bounce marks
// one of Exim's own bounces (R=).
type Record struct {
	Kind                      Kind
	QueueID                   string
	ClientName, ClientAddress string
	SASLMethod, SASLUsername  string
	Sender                    string
	Size                      int64
	NRcpt                     int
	Recipient                 string
	Recipients                []string
	Reject                    string
	MessageID                 string
	Bounce                    bool
	DSN, Status               string
}

// ErrNotPostfix is returned by ParsePostfix for a line not about a queued
// message; it is not a parse failure.
var ErrNotPostfix = errors.New("maillog: not a line about a queued message")

// The queue IDs ValidQueueID takes, the forms quarantine.ValidQueueID
// takes: Postfix short (src/global/mail_queue.h) and long (postconf(5)
// enable_long_queue_ids), Exim's (spec chapter "How Exim receives and
// delivers mail"), XXXXXX-XXXXXXXXXXX-XXXX since 4.97.
const postfixSafe = "0123456789BCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz" // safe_ultostr.c

var queueIDSyntax = regexp.MustCompile(`^(?:[0-9A-F]{6,}|[` + postfixSafe + `]{10,}z[` + postfixSafe[:51] + `]+|` +
	`[0-9A-Za-z]{6}-(?:[0-9A-Za-z]{6}-[0-9A-Za-z]{2}|[0-9A-Za-z]{11}-[0-9A-Za-z]{4}))$`)

// ValidQueueID reports whether id is a Postfix or Exim queue ID: at most
// 32 ASCII letters, digits and dashes, not starting with '-'.
func ValidQueueID(id string) bool { return len(id) <= 32 && queueIDSyntax.MatchString(id) }

// ParsePostfix parses the text after "postfix/daemon[pid]: " of Postfix
// 2.x and 3.x (smtpd(8), cleanup(8), qmgr(8), pickup(8), delivery agents).
func ParsePostfix(msg string) (Record, error) {
	var r Record
	if rest, ok := strings.CutPrefix(msg, "NOQUEUE: "); ok {
		if hasAnyPrefix(rest, "reject: ", "discard: ") {
			r.Kind = KindNoQueue
			parseAction(&r, rest)
			return r, nil
		}
		return r, ErrNotPostfix
	}
	id, rest, ok := strings.Cut(msg, ": ")
	if !ok || !ValidQueueID(id) {
		return r, ErrNotPostfix
	}
	r.QueueID = id
	var f map[string]string
	var err error
	if hasAnyPrefix(rest, "client=", "from=<", "to=<") {
		if f, err = fields(rest); err != nil {
			return r, err
		}
	}
	switch {
	case strings.HasPrefix(rest, "client="):
		r.Kind = KindClient
		if r.ClientName, r.ClientAddress, err = splitClient(f["client"]); err != nil {
			return r, err
		}
		r.SASLMethod, r.SASLUsername = f["sasl_method"], f["sasl_username"]
	case strings.HasPrefix(rest, "uid=") && strings.Contains(rest, " from=<"):
		r.Kind = KindPickup
		if r.Sender, _, ok = angle(rest[strings.Index(rest, " from=<")+len(" from="):]); !ok {
			return r, fmt.Errorf("pickup: malformed from=")
		}
	case strings.HasPrefix(rest, "message-id="):
		r.Kind = KindMessageID
		r.MessageID = strings.Trim(strings.TrimSpace(rest[len("message-id="):]), "<>")
	case strings.HasPrefix(rest, "from=<"):
		if _, ok := f["size"]; !ok {
			// "from=<>, status=expired, returned to sender" and the like.
			r.Kind = KindOther
			return r, nil
		}
		r.Kind = KindFrom
		r.Sender = f["from"]
		if r.Size, err = strconv.ParseInt(f["size"], 10, 64); err != nil || r.Size < 0 {
			return r, fmt.Errorf("qmgr: bad size=%q", f["size"])
		}
		if v, ok := f["nrcpt"]; ok {
			v, _, _ = strings.Cut(v, " ")
			if r.NRcpt, err = strconv.Atoi(v); err != nil || r.NRcpt < 0 {
				return r, fmt.Errorf("qmgr: bad nrcpt=%q", v)
			}
		}
	case strings.HasPrefix(rest, "to=<"):
		r.Kind = KindTo
		r.Recipient = f["to"]
		if o, ok := f["orig_to"]; ok && o != "" {
			r.Recipient = o
		}
		r.DSN = f["dsn"]
		r.Status, _, _ = strings.Cut(f["status"], " ")
	case rest == "removed":
		r.Kind = KindRemoved
	case hasAnyPrefix(rest, "reject: ", "discard: ", "milter-reject: ", "milter-discard: "):
		r.Kind = KindReject
		parseAction(&r, rest)
	case hasAnyPrefix(rest, "hold: ", "milter-hold: "):
		r.Kind = KindHold
		parseAction(&r, rest)
	default:
		r.Kind = KindOther
	}
	return r, nil
}

// Outcome returns the outcome a line reports (policy.ClassifyDSN): a to=
// line's status=bounced with a 5.x.x dsn= or status=deferred with 4.x.x,
// or a reject of a recipient as unknown (RCPT, 5.1.1).
func (r *Record) Outcome() (policy.OutcomeKind, bool) {
	switch r.Kind {
	case KindReject, KindNoQueue:
		kind, ok := policy.ClassifyDSN(r.DSN)
		return kind, ok && r.Reject == "RCPT" && kind == policy.OutcomeUnknownRcpt
	case KindTo:
		if r.Status == "bounced" || r.Status == "deferred" {
			return FailureOutcome(r.Status == "bounced", r.DSN)
		}
	}
	return 0, false
}

// FailureOutcome returns the outcome of a recipient's failure (bounce) or
// delay with status code dsn: a failure's is 5.x.x, a delay's 4.x.x.
func FailureOutcome(failed bool, dsn string) (policy.OutcomeKind, bool) {
	kind, ok := policy.ClassifyDSN(dsn)
	return kind, ok && failed == (kind != policy.OutcomeDeferral)
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	return slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(s, p) })
}

// parseAction reads smtpd's and cleanup's "ACTION: STAGE from
// NAME[ADDR]: CODE X.Y.Z TEXT; from=<s> to=<r> proto=ESMTP helo=<h>".
func parseAction(r *Record, rest string) {
	_, after, _ := strings.Cut(rest, ": ")
	r.Reject, _, _ = strings.Cut(after, " ")
	if client, text, ok := strings.Cut(strings.TrimPrefix(after, r.Reject+" from "), ": "); ok {
		r.ClientName, r.ClientAddress, _ = splitClient(client)
		code, tail, _ := strings.Cut(text, " ")
		dsn, _, _ := strings.Cut(tail, " ")
		if len(code) == 3 && strings.Count(dsn, ".") == 2 && dsn[0] == code[0] {
			r.DSN = dsn
		}
	}
	semi := strings.LastIndex(after, "; from=<")
	if semi < 0 {
		return
	}
	if a, more, ok := angle(after[semi+len("; from="):]); ok {
		r.Sender = a
		if strings.HasPrefix(more, " to=") {
			if a, _, ok := angle(more[len(" to="):]); ok {
				r.Recipient = a
			}
		}
	}
}

// fields parses Postfix's "name=value, name=value, ..." list. A value in
// angle brackets runs to its closing '>'; status= takes the rest.
func fields(s string) (map[string]string, error) {
	f := make(map[string]string, 8)
	for s != "" {
		name, v, ok := strings.Cut(s, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("malformed field list near %q", trunc(s, 30))
		}
		if strings.ContainsAny(name, " ,<>") {
			return nil, fmt.Errorf("malformed field name %q", trunc(name, 30))
		}
		s = ""
		switch {
		case name == "status": // the rest of the line
		case strings.HasPrefix(v, "<"):
			if v, s, ok = angle(v); !ok {
				return nil, fmt.Errorf("%s=: no closing '>'", name)
			}
		default:
			if i := strings.Index(v, ", "); i >= 0 {
				v, s = v[:i], v[i:]
			}
		}
		f[name] = v
		if s, ok = strings.CutPrefix(s, ", "); !ok {
			break // the end, or text after the list, e.g. "(queue active)"
		}
	}
	return f, nil
}

// angle returns the address inside a leading "<...>" and what follows: up
// to the first '>' outside quotes before ',', ' ' or the end.
func angle(s string) (addr, rest string, ok bool) {
	if !strings.HasPrefix(s, "<") {
		return "", s, false
	}
	inQuote := false
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == '>' && (i+1 == len(s) || s[i+1] == ',' || s[i+1] == ' '):
			return s[1:i], s[i+1:], true
		}
	}
	return "", s, false
}

// splitClient splits smtpd's "name[address]" or "name[address]:port".
func splitClient(s string) (name, addr string, err error) {
	open, closing := strings.IndexByte(s, '['), strings.LastIndexByte(s, ']')
	if open > 0 && closing > open {
		name, addr = s[:open], strings.TrimPrefix(strings.TrimPrefix(s[open+1:closing], "IPv6:"), "ipv6:")
		if addr != "" {
			return name, addr, nil
		}
	}
	return "", "", fmt.Errorf("malformed client=%q", trunc(s, 60))
}
